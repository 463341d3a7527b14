// Package ssh is the runbox provider whose sandboxes live on any Linux host
// reachable over SSH, as a remote user that need not be root.
//
// It speaks SSH itself (golang.org/x/crypto/ssh): no ssh binary, no
// ControlMaster. Targets are [user@]host[:port] or aliases of the SSH
// client configuration (~/.ssh/config, then /etc/ssh/ssh_config, read with
// github.com/kevinburke/ssh_config), whose HostName, User, Port,
// IdentityFile, IdentitiesOnly, ProxyJump, HostKeyAlias, UserKnownHostsFile,
// GlobalKnownHostsFile, StrictHostKeyChecking=accept-new and HashKnownHosts
// are honoured. Authentication uses ssh-agent ($SSH_AUTH_SOCK) and identity
// files. Host keys are checked against known_hosts: an unknown or changed
// key is a *HostKeyError naming the fingerprint, and nothing runs on the
// host; Provider.AcceptNew records an unknown key (never a changed one).
//
// Create uploads the static runboxd binary to the remote user's cache
// ($XDG_CACHE_HOME/runbox/runboxd-<sha256>, default ~/.cache), once per
// version: the upload is checked by size and SHA-256 before it is renamed
// into place, and a binary for another architecture than `uname -m` says
// is refused before anything is copied (ErrArchMismatch). runboxd then
// starts detached (setsid, nohup) under the sandbox's state directory
// ($XDG_STATE_HOME/runbox/sandboxes/<id>, default ~/.local/state, or
// /tmp/runbox-<uid>/<id> where that would make the socket path too long),
// listening on a unix socket there. Containment is runboxd's own choice:
// a cgroup per exec where the remote user can write one (root, or a
// delegated subtree), else /proc tracking as a child subreaper;
// Sandbox.Detail["containment"] and `runbox inspect` say which.
//
// Every call travels over one SSH connection per host and provider: each
// client connection is a direct-streamlocal channel to runboxd's socket,
// opened with the sandbox's secret (internal/daemonauth), which stays on
// this machine with the record ($RUNBOX_HOME/ssh/<id>). A dropped SSH
// connection leaves runboxd and its commands running: the next dial makes
// a new connection and the client re-attaches with exactly-once output.
// A runboxd that is gone from the host is runbox.ErrSandboxLost, with the
// end of its log. Remove stops everything through runboxd's stop protocol,
// kills anything a dead runboxd's commands left (found by RUNBOX_SANDBOX in
// their environment), and deletes the state directory on the host.
//
// The CLI, a fresh process per command, reaches a sandbox through its
// persistent endpoint (package internal/endpoint), which holds one provider
// and so one SSH connection, and opens channels with StreamDialer.
package ssh
