package client

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
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
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	return proto.Unmarshal(b, msg)
}
