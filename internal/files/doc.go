// Package files is runbox's file plumbing, shared by runboxd (inside the
// sandbox) and the client (on this machine): path resolution that cannot
// leave a root, single-file operations, tar streams in and out, sync
// manifests with a sha256 cache, .gitignore-style excludes, and the diff that
// decides what a sync sends.
//
// Every path is resolved with openat2(2) and RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS against the root's directory descriptor, and every
// final component is created, replaced or removed relative to its parent's
// descriptor without following it. So "..", absolute paths and symlinks
// (including ones that appear while an operation runs) cannot reach outside
// the root: the kernel refuses, and the error wraps runbox.ErrEscapesRoot.
// Archives are written by walking directory descriptors, so a symlink in a
// tree is archived as a link and never followed.
//
// It does not preserve ownership (archives carry uid/gid, extraction leaves
// files owned by whoever runs it), hard-link identity (a tree's hard links
// are archived as separate files; hard links in an archive are honoured when
// their target lies beneath the root), extended attributes or ACLs, and it
// does not archive devices, fifos or sockets.
package files
