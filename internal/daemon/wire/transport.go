package wire

// MaxFrameBytes is the largest HTTP/2 frame the client and runboxd accept
// from each other (SETTINGS_MAX_FRAME_SIZE): large enough that an output
// chunk (256 KiB) crosses in one frame, not sixteen of HTTP/2's default
// 16 KiB.
const MaxFrameBytes = 1 << 20

// HTTP/2 receive windows of runboxd and of the egress and port-forward
// clients (SETTINGS_INITIAL_WINDOW_SIZE and the connection's window).
// HTTP/2's defaults (1 MiB for Go's server) let one 256 KiB chunk after
// another wait for a WINDOW_UPDATE, which capped a carried connection's
// bulk rate; a window holds data a reader has not taken yet, so the
// connection's is a multiple of a stream's: one connection whose reader
// stalls (a command that stops reading) holds its stream's window, not
// the whole connection's. The connection's bounds what runboxd buffers.
const (
	StreamWindowBytes = 4 << 20
	ConnWindowBytes   = 64 << 20
)
