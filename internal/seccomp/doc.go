// Package seccomp builds and installs the system-call filter of a runbox
// local sandbox: in the spirit of Docker's default profile, it refuses with
// EPERM the calls that reach past the sandbox (the kernel keyring, bpf,
// perf events, kexec, module loading, mounts, swap, reboot, clock changes,
// file handles, io_uring, new user namespaces), and kills a process that
// makes calls under a foreign architecture (x32 on amd64).
//
// The commands' own filter (PrivilegeRules) keeps setuid and setgid bits
// off their files; LayerPrivilegeRules hands the chmod family with those
// bits to a Listener instead (user notification), which
// internal/layerchmod serves.
//
// The filter is built by hand from classic BPF instructions, without cgo
// and without libseccomp, so runboxd stays a static binary.
package seccomp
