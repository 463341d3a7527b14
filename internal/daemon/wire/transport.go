package wire

// MaxFrameBytes is the largest HTTP/2 frame the client and runboxd accept
// from each other (SETTINGS_MAX_FRAME_SIZE): large enough that an output
// chunk (256 KiB) crosses in one frame, not sixteen of HTTP/2's default
// 16 KiB.
const MaxFrameBytes = 1 << 20
