package wire

import (
	"encoding/binary"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Field numbers of an Output event, read from the generated descriptors so
// they cannot drift from proto/.
var (
	eventOutputField = (&runboxv1.ExecEvent{}).ProtoReflect().Descriptor().Fields().ByName("output").Number()
	outputFields     = (&runboxv1.Output{}).ProtoReflect().Descriptor().Fields()
	outputStream     = outputFields.ByName("stream").Number()
	outputSeq        = outputFields.ByName("seq").Number()
	outputData       = outputFields.ByName("data").Number()
)

// AppendOutputEnvelope appends c as one Connect stream envelope (flags,
// length, message) holding the ExecEvent of an Output: the bytes
// proto.Marshal gives for ExecEvent{Output: ChunkToProto(c)} (the
// equivalence test holds it to that), behind the 5-byte prefix. A Run
// stream writes it with one write instead of Connect's marshal into a
// buffer of its own and the transport's split writes.
func AppendOutputEnvelope(dst []byte, c runbox.Chunk) []byte {
	inner := 0
	st := uint64(StreamToProto(c.Stream))
	if st != 0 {
		inner += protowire.SizeTag(outputStream) + protowire.SizeVarint(st)
	}
	if c.Seq != 0 {
		inner += protowire.SizeTag(outputSeq) + protowire.SizeVarint(c.Seq)
	}
	if len(c.Data) > 0 {
		inner += protowire.SizeTag(outputData) + protowire.SizeBytes(len(c.Data))
	}
	msg := protowire.SizeTag(eventOutputField) + protowire.SizeBytes(inner)
	dst = append(dst, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(msg))
	dst = protowire.AppendTag(dst, eventOutputField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(inner))
	if st != 0 {
		dst = protowire.AppendTag(dst, outputStream, protowire.VarintType)
		dst = protowire.AppendVarint(dst, st)
	}
	if c.Seq != 0 {
		dst = protowire.AppendTag(dst, outputSeq, protowire.VarintType)
		dst = protowire.AppendVarint(dst, c.Seq)
	}
	if len(c.Data) > 0 {
		dst = protowire.AppendTag(dst, outputData, protowire.BytesType)
		dst = protowire.AppendBytes(dst, c.Data)
	}
	return dst
}
