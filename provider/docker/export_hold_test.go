package docker

// SetSnapshotCommitting makes every Snapshot call f with its name once
// the sandbox is held frozen for the commit, before committing (nil:
// nothing), for tests that make something happen at that moment.
func SetSnapshotCommitting(f func(name string)) { snapshotCommitting = f }
