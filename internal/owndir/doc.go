// Package owndir opens a sandbox's workdir, the host directory bound
// read-write into the sandbox as its workspace, and decides whether it may
// be one.
//
// The rule: a workspace holds only what its owner put there. A workdir
// must be a directory that only its owner can add entries to, and its
// owner must be the caller (Check). So the only principals who can put
// anything into it, now or later, are the caller and host root (who can
// reach the caller's sandboxes anyway); no other user's or daemon's unix
// socket or file can be in it, whatever its path. The set of directories
// refused is defined by who may write, not by a list of paths: /tmp,
// /var/tmp, /dev/shm, a group's project directory and another user's home
// are refused because of their modes, owners and ACLs, and so is any such
// directory at any other path.
//
// It is race-free when the caller uses the handle Open returns: the check
// reads the inode that handle holds (fstat, its ACL through
// /proc/self/fd), and a provider binds that same handle (or compares a
// later open's device and inode with it), so a rename or a symlink swap
// after the check cannot put another directory in the sandbox.
//
// It does not look inside the directory: a sticky or shared directory
// inside a workdir of the caller's, or a socket the caller put there, is
// the caller's own doing.
package owndir
