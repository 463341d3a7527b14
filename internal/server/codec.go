package server

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// strictJSON is connect's JSON codec, except that a field the message does
// not have is an error naming it instead of being dropped: a caller's typo
// ("timeout": 5 for "timeoutMs") must not silently run without a timeout.
type strictJSON struct{ name string }

func (c strictJSON) Name() string { return c.name }

func (strictJSON) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.MarshalOptions{}.Marshal(msg)
}

func (strictJSON) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if len(b) == 0 {
		return nil // an empty body is an empty message, as connect's own codec has it
	}
	return protojson.UnmarshalOptions{}.Unmarshal(b, msg)
}

func (strictJSON) IsBinary() bool { return false }
