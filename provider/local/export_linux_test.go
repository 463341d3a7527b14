package local

// SetSnapshotCopying makes every Snapshot call f with its name once the
// sandbox is frozen for the copy, before copying (nil: nothing), for
// tests that make something happen at that moment.
func SetSnapshotCopying(f func(name string)) { snapshotCopying = f }
