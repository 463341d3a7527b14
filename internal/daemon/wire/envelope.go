package wire

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/runbox/runbox"
)

// The field numbers of ExecEvent.output and Output.data in
// proto/runbox/v1/runbox.proto. They are constants, not read from the
// generated descriptors, because reading a descriptor's fields at init
// unpacks the whole file's descriptors in every program that links this
// package (runbox-full's start-up); TestOutputFieldNumbersMatchTheSchema
// holds them to the descriptors, and TestOutputEnvelope to proto.Marshal.
const (
	outputField protowire.Number = 2
	dataField   protowire.Number = 3
)

// AppendOutputEnvelope appends c as one Connect stream envelope (flags,
// 4-byte length, message) holding ExecEvent{Output: ChunkToProto(c)}: its
// header (AppendOutputHeader) and then c.Data.
func AppendOutputEnvelope(dst []byte, c runbox.Chunk) ([]byte, error) {
	dst, err := AppendOutputHeader(dst, c)
	if err != nil {
		return dst, err
	}
	return append(dst, c.Data...), nil
}

// AppendOutputHeader appends the bytes of c's Connect stream envelope that
// come before c.Data: the 5-byte prefix, the ExecEvent's output field, the
// Output's stream and seq (marshalled by the generated code) and the data
// field's tag and length. Followed by c.Data, they are exactly the bytes
// proto.Marshal gives for the event (data is Output's last field), so a
// Run stream can write the chunk from where it lies (a writev of header
// and data) instead of copying it into a marshalled message.
func AppendOutputHeader(dst []byte, c runbox.Chunk) ([]byte, error) {
	head := ChunkToProto(runbox.Chunk{Stream: c.Stream, Seq: c.Seq})
	size := proto.Size(head)
	if len(c.Data) > 0 { // proto3 leaves an empty bytes field out
		size += protowire.SizeTag(dataField) + protowire.SizeBytes(len(c.Data))
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = protowire.AppendTag(dst, outputField, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(size))
	out, err := proto.MarshalOptions{}.MarshalAppend(dst, head)
	if err != nil {
		return dst[:start], fmt.Errorf("marshal output %d: %w", c.Seq, err)
	}
	if len(c.Data) > 0 {
		out = protowire.AppendTag(out, dataField, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(len(c.Data)))
	}
	binary.BigEndian.PutUint32(out[start+1:start+5], uint32(len(out)-start-5+len(c.Data)))
	return out, nil
}
