// Package daemon is runboxd's RPC adapter: it serves the runbox.v1 API over
// HTTP/2 cleartext (the Connect protocol) and delegates every call to a
// [supervisor.Supervisor]. Each RPC lives in its own file and only converts
// and delegates; the supervisor decides. Conversions are in package wire,
// shared with the client.
//
// The daemon does not tie an exec's lifetime to a connection: when a Run or
// Attach stream goes away, the handler returns and the exec keeps running to
// completion or its deadline.
package daemon
