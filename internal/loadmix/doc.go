// Package loadmix holds the mixes of commands that load one runboxd through
// the Go client: the stress mix (every call of the API, observers that
// never read, session execs, Signal and Cancel racing Start) and the soak
// mix (quick commands, timeouts, cancels racing starts, floods with a
// checksum, background processes, PTY execs, observers that detach
// mid-stream). The client's TestStress, the conformance suite's Stress and
// Soak cases (every provider) and the soak benchmark (go run ./bench -only
// soak) all send these mixes, so what CI asserts is what the benchmark
// measures.
//
// Every process a mix leaves behind for a while runs `sleep MARKER`, so a
// caller counts survivors by its marker afterwards. The package counts
// outcomes; it asserts nothing and measures no time.
package loadmix
