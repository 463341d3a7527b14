package wire

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// AppendOutputEnvelope appends c as one Connect stream envelope (flags,
// 4-byte length, message) holding ExecEvent{Output: ChunkToProto(c)},
// marshalled by the generated code straight into dst behind the prefix. A
// Run stream writes it with one write instead of Connect's marshal into a
// buffer of its own and the transport's split writes.
func AppendOutputEnvelope(dst []byte, c runbox.Chunk) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	ev := &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Output{Output: ChunkToProto(c)}}
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, ev)
	if err != nil {
		return dst[:start], fmt.Errorf("marshal output %d: %w", c.Seq, err)
	}
	binary.BigEndian.PutUint32(out[start+1:start+5], uint32(len(out)-start-5))
	return out, nil
}
