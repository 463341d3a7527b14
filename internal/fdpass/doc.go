// Package fdpass moves connected TCP sockets between runboxd and its host
// side when both run on one kernel (local, host and docker sandboxes reached
// through a unix socket): frames on that socket, each carrying at most one
// file descriptor (SCM_RIGHTS), so the kernel moves a carried connection's
// bytes instead of both processes copying them through RPC messages.
//
// A received descriptor is hostile until [Conn.Recv] and [TCPConn] have
// checked it: one per frame, delivered close-on-exec, a connected inet
// stream socket, used only to move bytes. Anything else is closed and
// refused with [ErrHostileFD].
//
// [Divert] takes the connections that open with [Preface] off runboxd's
// listener before HTTP sees them; the peer names the service it wants on
// the preface line, so a runboxd that passes sockets says so by answering,
// and one that does not fails the host side's first read (an HTTP error),
// never silently.
package fdpass
