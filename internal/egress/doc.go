// Package egress is a private-network sandbox's way out: inside, runboxd's
// HTTP and SOCKS5 proxy on the sandbox's own loopback takes each
// connection a command opens and carries it over runbox's channel
// (EgressService) to the host side, where the sandbox's [Policy] decides
// by the name the command asked for, resolves it there, refuses private,
// loopback, link-local and metadata addresses unless allowed, dials, and
// splices bytes both ways. ForwardService, its reverse, carries
// `runbox port-forward` connections to a port inside the sandbox.
package egress
