package wire

import (
	"bytes"
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// TestOutputEnvelope: the envelope appended behind dst's bytes carries
// flags 0, the message's length, and the bytes proto.Marshal gives for the
// Output event, for edge values of every field; it round-trips; and
// AppendOutputHeader gives exactly its bytes before the chunk's data.
func TestOutputEnvelope(t *testing.T) {
	for _, c := range []runbox.Chunk{
		{},
		{Stream: runbox.Stdout, Seq: 1, Data: []byte("x")},
		{Stream: runbox.Stderr, Seq: 1 << 63, Data: bytes.Repeat([]byte{0, 0xff}, 70_000)},
		{Stream: runbox.Stdout, Seq: 127, Data: make([]byte, 127)},
		{Stream: runbox.Stdout, Seq: 128, Data: make([]byte, 128)},
		{Stream: runbox.Stderr, Data: []byte("no seq")},
		{Seq: 9},
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(
			&runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Output{Output: ChunkToProto(c)}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendOutputEnvelope([]byte("keep"), c)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[:4]) != "keep" {
			t.Fatalf("dst's bytes were overwritten: %q", got[:4])
		}
		got = got[4:]
		if got[0] != 0 || binary.BigEndian.Uint32(got[1:5]) != uint32(len(want)) {
			t.Fatalf("chunk stream %d seq %d len %d: prefix %x, want flags 0 and length %d", c.Stream, c.Seq, len(c.Data), got[:5], len(want))
		}
		if !bytes.Equal(got[5:], want) {
			t.Fatalf("chunk stream %d seq %d len %d: message differs from proto.Marshal", c.Stream, c.Seq, len(c.Data))
		}
		head, err := AppendOutputHeader([]byte("keep"), c)
		if err != nil {
			t.Fatal(err)
		}
		if h := head[4:]; len(h)+len(c.Data) != len(got) || !bytes.Equal(h, got[:len(h)]) {
			t.Fatalf("chunk stream %d seq %d len %d: header %x is not the envelope's start %x", c.Stream, c.Seq, len(c.Data), h, got[:min(len(h), len(got))])
		}
		var back runboxv1.ExecEvent
		if err := proto.Unmarshal(got[5:], &back); err != nil {
			t.Fatal(err)
		}
		if r := ChunkFromProto(back.GetOutput()); r.Stream != c.Stream || r.Seq != c.Seq || !bytes.Equal(r.Data, c.Data) {
			t.Fatalf("round trip gave stream %d seq %d len %d", r.Stream, r.Seq, len(r.Data))
		}
	}
}

// TestOutputFieldNumbersMatchTheSchema: the field numbers the envelope
// writes are the generated descriptors' own.
func TestOutputFieldNumbersMatchTheSchema(t *testing.T) {
	if got := (&runboxv1.ExecEvent{}).ProtoReflect().Descriptor().Fields().ByName("output").Number(); got != outputField {
		t.Errorf("ExecEvent.output is field %d in the schema, the envelope writes %d", got, outputField)
	}
	if got := (&runboxv1.Output{}).ProtoReflect().Descriptor().Fields().ByName("data").Number(); got != dataField {
		t.Errorf("Output.data is field %d in the schema, the envelope writes %d", got, dataField)
	}
}
