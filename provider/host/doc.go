// Package host is the runbox provider whose sandboxes are plain host
// processes: each sandbox is one detached runboxd, reached over a unix socket
// in the sandbox's directory under the runbox home.
//
// A host sandbox isolates nothing: commands run as the calling user, on the
// host's filesystem and network, like an agent framework's "local" backend.
// What it does give is runboxd's process supervision: deadlines, whole-tree
// cancellation, reattach and replay. It does not apply resource limits and
// has no images; Create refuses specs that ask for them rather than
// pretending.
//
// State lives on disk under the runbox home (see internal/procbox, which
// the local provider shares), so separate processes (`runbox up`, `runbox
// exec`, `runbox rm`) share it.
package host
