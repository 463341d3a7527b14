package client

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// The codec's output fast path decodes every ExecEvent as the generic
// decoder does: output of every size, the other events, unknown and
// repeated fields, truncated messages.
func TestCodecDecodesExecEventsAsProto(t *testing.T) {
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		return b
	}
	var msgs [][]byte
	for _, n := range []int{0, 1, 100, 32<<10 - 1, 32 << 10, 64<<10 + 1, 256 << 10, 1 << 20, 1<<20 + 1} {
		for _, s := range []runboxv1.Stream{runboxv1.Stream_STREAM_STDOUT, runboxv1.Stream_STREAM_STDERR} {
			b, err := proto.Marshal(&runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Output{
				Output: &runboxv1.Output{Stream: s, Seq: uint64(n) + 7, Data: data(n)}}})
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, b)
		}
	}
	for _, ev := range []*runboxv1.ExecEvent{
		{Event: &runboxv1.ExecEvent_Started{Started: &runboxv1.Started{Id: "x", Pid: 3}}},
		{Event: &runboxv1.ExecEvent_Gap{Gap: &runboxv1.Gap{FromSeq: 1, ToSeq: 4, Bytes: 9}}},
		{Event: &runboxv1.ExecEvent_Exited{Exited: &runboxv1.Exited{Result: &runboxv1.Result{Id: "x", ExitCode: 3}}}},
		{Event: &runboxv1.ExecEvent_Output{Output: &runboxv1.Output{}}},
		{},
	} {
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, b)
	}
	// Output with an unknown field, a repeated field, and two output events
	// in one message (the second merges into the first).
	out := func(fields ...[]byte) []byte {
		body := bytes.Join(fields, nil)
		b := protowire.AppendTag(nil, 2, protowire.BytesType)
		return protowire.AppendBytes(b, body)
	}
	seq := func(v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), v)
	}
	dat := func(p []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), p)
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 5)
	msgs = append(msgs,
		out(seq(3), dat(data(70<<10)), unknown),
		out(seq(3), seq(4), dat(data(10))),
		out(dat(data(40<<10)), dat(data(50<<10))),
		append(out(seq(3), dat(data(40<<10))), out(seq(5))...),
		append(out(seq(3)), unknown...),
	)
	full := msgs[10] // 64 KiB + 1 of stdout
	msgs = append(msgs, full[:len(full)-1], full[:3])
	for i, b := range msgs {
		var want, got runboxv1.ExecEvent
		wantErr := proto.Unmarshal(b, &want)
		gotErr := protoCodec{}.Unmarshal(b, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("message %d: error %v, want %v", i, gotErr, wantErr)
		}
		if wantErr == nil && !proto.Equal(&got, &want) {
			t.Fatalf("message %d: decoded differently from proto.Unmarshal", i)
		}
		if o := got.GetOutput(); o != nil {
			releaseOutputData(o.GetData())
		}
	}
}
