// Package egress is a private-network sandbox's way out: inside, runboxd's
// HTTP and SOCKS5 proxy on the sandbox's own loopback takes each
// connection a command opens and carries it over runbox's channel
// (EgressService) to the host side, where the sandbox's [Policy] decides
// by the name the command asked for, resolves it there, refuses private,
// loopback, link-local and metadata addresses unless allowed, dials, and
// splices bytes both ways. ForwardService, its reverse, carries
// `runbox port-forward` connections to a port inside the sandbox.
//
// Where runboxd's unix socket is on the host side's kernel, bytes leave
// the RPC: runboxd hands the command's socket to the host side (egress,
// [FDEgress]) or the socket it connected in the sandbox (port-forward,
// [FDForward]) over that socket (internal/fdpass), and the host side
// splices it in the kernel. The host side asks for it explicitly
// ([Host.PassFDs], [ForwardConnFD]); runboxd's answer says it can.
package egress
