package front

import (
	"os"

	"github.com/runbox/runbox"
)

// maxShownBufs bounds the chunks gathered for one write (writev takes at
// most 1,024).
const maxShownBufs = 256

// shownOutput gathers the Data of consecutive Output events of one stream
// that arrived in one read of the daemon's answer, and shows them with one
// write (a writev where the system has one): a read holds two to three
// chunks at full speed, each a write of its own before.
type shownOutput struct {
	stream runbox.Stream
	bufs   [][]byte
}

// add gathers data of stream s, showing what was gathered of the other
// stream first.
func (o *shownOutput) add(s runbox.Stream, data []byte) {
	if len(o.bufs) > 0 && (s != o.stream || len(o.bufs) == maxShownBufs) {
		o.flush()
	}
	o.stream = s
	o.bufs = append(o.bufs, data)
}

// flush shows what was gathered. Errors are ignored, as a single write's
// were: the command's output has nowhere else to go.
func (o *shownOutput) flush() {
	if len(o.bufs) == 0 {
		return
	}
	f := os.Stdout
	if o.stream == runbox.Stderr {
		f = os.Stderr
	}
	_ = writeAll(f, o.bufs)
	clear(o.bufs) // let go of the read buffer's slices
	o.bufs = o.bufs[:0]
}
