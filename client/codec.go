package client

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1wire"
)

// errUnencodable marks a request the client could not encode (a string
// field that is not valid UTF-8, say). connect reports it with code
// Internal, which would otherwise read as a transport failure; this mark
// lets cause report it as the caller's invalid argument, before anything
// was sent, instead of retrying it until the sandbox is declared lost.
var errUnencodable = errors.New("the request cannot be encoded")

// protoCodec is connect's binary protobuf codec with marshal failures
// marked errUnencodable.
type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(m any) ([]byte, error) { return protoCodec{}.MarshalAppend(nil, m) }

func (protoCodec) MarshalAppend(b []byte, m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a proto.Message", errUnencodable, m)
	}
	out, err := proto.MarshalOptions{}.MarshalAppend(b, msg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnencodable, err)
	}
	return out, nil
}

func (protoCodec) Unmarshal(b []byte, m any) error {
	if ev, ok := m.(*runboxv1.ExecEvent); ok && unmarshalExecEvent(b, ev) {
		return nil
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	return proto.Unmarshal(b, msg)
}

// unmarshalExecEvent decodes an ExecEvent carrying output with the plain
// generated decoder (gen/runbox/v1/runboxv1wire, whose tests hold it to
// the protobuf runtime's rules), taking the output's bytes from outputBufs
// (see releaseOutputData): at full speed a fresh allocation per chunk is
// most of what the client spends per byte after the transport (the
// runtime faults in and the collector scans each one). It reports false,
// leaving m alone, for any other event and for unknown fields, which the
// generic decoder then handles.
func unmarshalExecEvent(b []byte, m *runboxv1.ExecEvent) bool {
	if len(b) == 0 || b[0] != outputTag {
		return false
	}
	var w runboxv1wire.ExecEvent
	if w.Unmarshal(b) != nil || w.Output == nil || len(w.UnknownFields) > 0 || len(w.Output.UnknownFields) > 0 {
		return false
	}
	proto.Reset(m)
	m.Event = &runboxv1.ExecEvent_Output{Output: &runboxv1.Output{
		Stream: runboxv1.Stream(w.Output.Stream), Seq: w.Output.Seq, Data: outputData(w.Output.Data)}}
	return true
}

// outputTag is ExecEvent's output field's tag (field 2, length-delimited).
const outputTag = 2<<3 | 2

// outputBufs holds buffers for output chunks of at least minPooledOutput
// bytes, one pool per power-of-two capacity up to maxPooledOutput.
var outputBufs [outputBufClasses]sync.Pool

const (
	minPooledOutput  = 64 << 10
	maxPooledOutput  = 1 << 20
	outputBufClasses = 5 // 64 KiB, 128 KiB, ..., 1 MiB
)

// outputClass returns the pool for a chunk of n bytes, or -1.
func outputClass(n int) int {
	if n < minPooledOutput/2 || n > maxPooledOutput {
		return -1
	}
	c := 0
	for minPooledOutput<<c < n {
		c++
	}
	return c
}

// outputData returns a copy of p, in a pooled buffer when p is large.
func outputData(p []byte) []byte {
	c := outputClass(len(p))
	if c < 0 {
		return bytes.Clone(p)
	}
	var buf []byte
	if v, ok := outputBufs[c].Get().(*[]byte); ok {
		buf = (*v)[:len(p)]
	} else {
		buf = make([]byte, len(p), minPooledOutput<<c)
	}
	copy(buf, p)
	return buf
}

// releaseOutputData gives a chunk's bytes back for reuse, once nothing
// holds them (the caller wrote them to an io.Writer, which may not retain
// them). Bytes of another size class are left to the garbage collector.
func releaseOutputData(p []byte) {
	c := outputClass(cap(p))
	if c < 0 || cap(p) != minPooledOutput<<c {
		return
	}
	p = p[:cap(p)]
	outputBufs[c].Put(&p)
}
