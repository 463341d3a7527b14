package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1wire"
)

// The generated code (gen/runbox/v1/runboxv1wire) against the protobuf
// runtime and protoc-gen-go's types, for every message it holds: random
// messages with every field kind at edge values and random unknown fields,
// both ways, and mutated encodings, which both must accept or refuse alike.

// wireMessage is what the generated types have in common.
type wireMessage interface {
	MarshalAppend([]byte) ([]byte, error)
	Unmarshal([]byte) error
}

// pairs lists each generated type beside protoc-gen-go's.
var pairs = []struct {
	wire func() wireMessage
	pb   func() proto.Message
}{
	{func() wireMessage { return &runboxv1wire.RunRequest{} }, func() proto.Message { return &runboxv1.RunRequest{} }},
	{func() wireMessage { return &runboxv1wire.ExecSpec{} }, func() proto.Message { return &runboxv1.ExecSpec{} }},
	{func() wireMessage { return &runboxv1wire.EnvVar{} }, func() proto.Message { return &runboxv1.EnvVar{} }},
	{func() wireMessage { return &runboxv1wire.PtySize{} }, func() proto.Message { return &runboxv1.PtySize{} }},
	{func() wireMessage { return &runboxv1wire.AttachRequest{} }, func() proto.Message { return &runboxv1.AttachRequest{} }},
	{func() wireMessage { return &runboxv1wire.CancelRequest{} }, func() proto.Message { return &runboxv1.CancelRequest{} }},
	{func() wireMessage { return &runboxv1wire.ExecEvent{} }, func() proto.Message { return &runboxv1.ExecEvent{} }},
	{func() wireMessage { return &runboxv1wire.Started{} }, func() proto.Message { return &runboxv1.Started{} }},
	{func() wireMessage { return &runboxv1wire.Output{} }, func() proto.Message { return &runboxv1.Output{} }},
	{func() wireMessage { return &runboxv1wire.Gap{} }, func() proto.Message { return &runboxv1.Gap{} }},
	{func() wireMessage { return &runboxv1wire.Exited{} }, func() proto.Message { return &runboxv1.Exited{} }},
	{func() wireMessage { return &runboxv1wire.Result{} }, func() proto.Message { return &runboxv1.Result{} }},
	{func() wireMessage { return &runboxv1wire.InfoResponse{} }, func() proto.Message { return &runboxv1.InfoResponse{} }},
}

var det = proto.MarshalOptions{Deterministic: true}

// goName is protoc-gen-go's Go name of a field (snake_case to CamelCase).
func goName(name protoreflect.Name) string {
	var b strings.Builder
	for p := range strings.SplitSeq(string(name), "_") {
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	return b.String()
}

// edgeInt returns an integer of bits bits, often an edge value.
func edgeInt(r *rand.Rand, bits int) int64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return -1
	case 2:
		return 1<<(bits-1) - 1
	case 3:
		return -1 << (bits - 1)
	case 4:
		return r.Int64N(300)
	}
	return int64(r.Uint64()) >> (64 - bits)
}

func edgeUint(r *rand.Rand, bits int) uint64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64 >> (64 - bits)
	case 2:
		return uint64(r.IntN(300))
	}
	return r.Uint64() >> (64 - bits)
}

// randText is valid UTF-8, sometimes empty, sometimes multi-byte or NUL.
func randText(r *rand.Rand) string {
	runes := []rune{'a', 'Z', ' ', 0, 'é', '世', '\U0001F600', 0x7f, 0xfffd}
	var b strings.Builder
	for range r.IntN(3) * r.IntN(12) {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

// randBytes is any bytes, sometimes empty, long enough now and then for a
// length of several varint bytes.
func randBytes(r *rand.Rand) []byte {
	n := r.IntN(3) * r.IntN(20)
	if r.IntN(50) == 0 {
		n = 200 + r.IntN(20000)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// randUnknown returns well-formed fields with numbers the messages do not
// use, of every wire type, groups included.
func randUnknown(r *rand.Rand) []byte {
	var b []byte
	for range r.IntN(4) {
		num := protowire.Number(100 + r.IntN(1000))
		if r.IntN(5) == 0 {
			num = protowire.MaxValidNumber
		}
		switch r.IntN(5) {
		case 0:
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), edgeUint(r, 64))
		case 1:
			b = protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), r.Uint32())
		case 2:
			b = protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), r.Uint64())
		case 3:
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), randBytes(r))
		case 4:
			b = protowire.AppendTag(b, num, protowire.StartGroupType)
			b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), r.Uint64())
			b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), randBytes(r))
			b = protowire.AppendTag(b, num, protowire.EndGroupType)
		}
	}
	return b
}

// fillProto sets fields of m at random through the runtime's reflection,
// unknown fields included.
func fillProto(r *rand.Rand, m protoreflect.Message) {
	fs := m.Descriptor().Fields()
	for i := range fs.Len() {
		f := fs.Get(i)
		if r.IntN(3) == 0 {
			continue
		}
		switch {
		case f.IsMap():
			mp := m.Mutable(f).Map()
			for range r.IntN(4) {
				v := protoreflect.ValueOfString(randText(r))
				if f.MapValue().Kind() == protoreflect.BytesKind {
					v = protoreflect.ValueOfBytes(randBytes(r))
				}
				mp.Set(protoreflect.ValueOfString(randText(r)).MapKey(), v)
			}
		case f.IsList():
			l := m.Mutable(f).List()
			for range r.IntN(4) {
				if f.Kind() == protoreflect.MessageKind {
					fillProto(r, l.AppendMutable().Message())
				} else {
					l.Append(protoValue(r, f))
				}
			}
		case f.Kind() == protoreflect.MessageKind:
			fillProto(r, m.Mutable(f).Message()) // a oneof's last member set wins
		default:
			m.Set(f, protoValue(r, f))
		}
	}
	if r.IntN(3) == 0 {
		m.SetUnknown(randUnknown(r))
	}
}

func protoValue(r *rand.Rand, f protoreflect.FieldDescriptor) protoreflect.Value {
	switch f.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(edgeInt(r, 32)))
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(edgeInt(r, 32)))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(edgeInt(r, 64))
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(uint32(edgeUint(r, 32)))
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(edgeUint(r, 64))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randText(r))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(randBytes(r))
	}
	panic("protoValue: kind " + f.Kind().String())
}

// fillWire sets the fields of the generated struct v (of the message d)
// at random through Go's reflection, one member of a oneof at most.
func fillWire(r *rand.Rand, v reflect.Value, d protoreflect.MessageDescriptor) {
	fs := d.Fields()
	oneofs := map[protoreflect.FullName]protoreflect.Name{}
	for i := range d.Oneofs().Len() {
		o := d.Oneofs().Get(i)
		if n := r.IntN(o.Fields().Len() + 1); n < o.Fields().Len() {
			oneofs[o.FullName()] = o.Fields().Get(n).Name()
		}
	}
	for i := range fs.Len() {
		f := fs.Get(i)
		if o := f.ContainingOneof(); o != nil && oneofs[o.FullName()] != f.Name() {
			continue
		}
		if r.IntN(3) == 0 {
			continue
		}
		fv := v.FieldByName(goName(f.Name()))
		if !fv.IsValid() {
			panic("fillWire: no field for " + string(f.FullName()))
		}
		switch {
		case f.IsMap():
			fv.Set(reflect.MakeMap(fv.Type()))
			for range r.IntN(4) {
				val := reflect.ValueOf(randText(r))
				if f.MapValue().Kind() == protoreflect.BytesKind {
					val = reflect.ValueOf(randBytes(r))
				}
				fv.SetMapIndex(reflect.ValueOf(randText(r)), val)
			}
		case f.IsList():
			for range r.IntN(4) {
				e := reflect.New(fv.Type().Elem()).Elem()
				wireValue(r, e, f)
				fv.Set(reflect.Append(fv, e))
			}
		default:
			wireValue(r, fv, f)
		}
	}
	if r.IntN(3) == 0 {
		v.FieldByName("UnknownFields").SetBytes(randUnknown(r))
	}
}

func wireValue(r *rand.Rand, v reflect.Value, f protoreflect.FieldDescriptor) {
	switch f.Kind() {
	case protoreflect.MessageKind:
		v.Set(reflect.New(v.Type().Elem()))
		fillWire(r, v.Elem(), f.Message())
	case protoreflect.BytesKind:
		v.SetBytes(randBytes(r))
	case protoreflect.StringKind:
		v.SetString(randText(r))
	case protoreflect.BoolKind:
		v.SetBool(r.IntN(2) == 0)
	case protoreflect.EnumKind, protoreflect.Int32Kind:
		v.SetInt(edgeInt(r, 32))
	case protoreflect.Int64Kind:
		v.SetInt(edgeInt(r, 64))
	case protoreflect.Uint32Kind:
		v.SetUint(edgeUint(r, 32))
	case protoreflect.Uint64Kind:
		v.SetUint(edgeUint(r, 64))
	default:
		panic("wireValue: kind " + f.Kind().String())
	}
}

// TestGeneratedAsTheRuntime: for random messages of every generated type,
// what the runtime writes decodes with the generated code and encodes
// again to the same bytes, and what the generated code writes decodes with
// the runtime and encodes again (deterministically) to the same bytes.
func TestGeneratedAsTheRuntime(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(1, seed))
	for _, p := range pairs {
		name := p.pb().ProtoReflect().Descriptor().FullName()
		for i := range 3000 {
			// The runtime's message through the generated code.
			pm := p.pb()
			fillProto(r, pm.ProtoReflect())
			want, err := det.Marshal(pm)
			if err != nil {
				t.Fatal(err)
			}
			wm := p.wire()
			if err := wm.Unmarshal(want); err != nil {
				t.Fatalf("seed %d: %s case %d: the generated code cannot decode %v: %v", seed, name, i, pm, err)
			}
			got, err := wm.MarshalAppend(nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("seed %d: %s case %d: %v decodes and encodes again to\n%x (%v), the runtime's\n%x", seed, name, i, pm, got, err, want)
			}
			// The generated code's message through the runtime.
			wm = p.wire()
			fillWire(r, reflect.ValueOf(wm).Elem(), pm.ProtoReflect().Descriptor())
			b, err := wm.MarshalAppend([]byte("prefix"))
			if err != nil || !bytes.HasPrefix(b, []byte("prefix")) {
				t.Fatalf("seed %d: %s case %d: marshal %+v: %v", seed, name, i, wm, err)
			}
			b = b[len("prefix"):]
			pm = p.pb()
			if err := proto.Unmarshal(b, pm); err != nil {
				t.Fatalf("seed %d: %s case %d: the runtime cannot decode %+v (%x): %v", seed, name, i, wm, b, err)
			}
			if again, err := det.Marshal(pm); err != nil || !bytes.Equal(again, b) {
				t.Fatalf("seed %d: %s case %d: %+v encodes to\n%x, and through the runtime to\n%x (%v)", seed, name, i, wm, b, again, err)
			}
		}
	}
}

// mutate damages b at random: a cut, a changed or inserted byte, a field of
// a reserved or group wire type, a length too long, or noise.
func mutate(r *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	for range 1 + r.IntN(2) {
		switch r.IntN(7) {
		case 0:
			if len(b) > 0 {
				b = b[:r.IntN(len(b))]
			}
		case 1:
			if len(b) > 0 {
				b[r.IntN(len(b))] = byte(r.Uint32())
			}
		case 2:
			if len(b) > 0 {
				b[r.IntN(len(b))] = []byte{0x80, 0xff, 0x00, 0x7f, 0x04, 0x0b, 0x0c}[r.IntN(7)]
			}
		case 3:
			i := r.IntN(len(b) + 1)
			b = append(b[:i], append([]byte{byte(r.Uint32())}, b[i:]...)...)
		case 4:
			num := protowire.Number(1 + r.IntN(30))
			b = protowire.AppendTag(b, num, protowire.Type(r.IntN(8)))
			for range r.IntN(4) {
				b = append(b, byte(r.Uint32()))
			}
		case 5:
			b = protowire.AppendTag(b, protowire.Number(1+r.IntN(30)), protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(r.IntN(100)))
		case 6:
			b = append(b, randBytes(r)...)
		}
	}
	return b
}

// TestGeneratedRefusesAsTheRuntime: damaged and random encodings of every
// generated type are refused by the generated code exactly when the
// runtime refuses them, without a panic, and what both accept encodes
// again to the same bytes.
func TestGeneratedRefusesAsTheRuntime(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(2, seed))
	refused := 0
	for _, p := range pairs {
		name := p.pb().ProtoReflect().Descriptor().FullName()
		for i := range 3000 {
			pm := p.pb()
			fillProto(r, pm.ProtoReflect())
			b, err := det.Marshal(pm)
			if err != nil {
				t.Fatal(err)
			}
			b = mutate(r, b)
			pm, wm := p.pb(), p.wire()
			perr, werr := proto.Unmarshal(b, pm), wm.Unmarshal(b)
			if (perr == nil) != (werr == nil) {
				t.Fatalf("seed %d: %s case %d: %x: the runtime says %v, the generated code %v", seed, name, i, b, perr, werr)
			}
			if perr != nil {
				refused++
				continue
			}
			want, err := det.Marshal(pm)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := wm.MarshalAppend(nil); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("seed %d: %s case %d: %x decodes and encodes again to\n%x (%v), through the runtime to\n%x", seed, name, i, b, got, err, want)
			}
		}
	}
	if refused < 1000 {
		t.Errorf("only %d damaged messages were refused: the test damages too little", refused)
	}
}
