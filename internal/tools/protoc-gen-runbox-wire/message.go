package main

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// emitMessage writes a message's type and its methods.
func emitMessage(g *protogen.GeneratedFile, m *protogen.Message) error {
	name := m.GoIdent.GoName
	g.P("// ", name, " is the message ", m.Desc.FullName(), ".")
	if m.Comments.Leading != "" {
		g.P("//")
		emitComments(g, m.Comments.Leading)
	}
	g.P("type ", name, " struct {")
	for _, f := range m.Fields {
		if o := f.Oneof; o != nil && o.Fields[0] == f {
			g.P("// Oneof ", o.Desc.Name(), ": at most one of ", strings.Join(goNames(o.Fields), ", "),
				" is set; decoding one clears the others.")
			emitComments(g, o.Comments.Leading)
		}
		emitComments(g, f.Comments.Leading)
		g.P(f.GoName, " ", goType(f), trailing(f.Comments.Trailing))
	}
	g.P("// UnknownFields holds the fields this code does not know, as read;")
	g.P("// MarshalAppend writes them after the known ones.")
	g.P("UnknownFields []byte")
	g.P("}")
	g.P()
	g.P("// Reset clears m.")
	g.P("func (m *", name, ") Reset() { *m = ", name, "{} }")
	g.P()
	emitMarshal(g, m)
	g.P("// Unmarshal sets m to the message b encodes; bytes fields alias b.")
	g.P("func (m *", name, ") Unmarshal(b []byte) error {")
	g.P("*m = ", name, "{}")
	g.P("return m.merge(b)")
	g.P("}")
	g.P()
	emitMerge(g, m)
	return nil
}

func goNames(fs []*protogen.Field) []string {
	var s []string
	for _, f := range fs {
		s = append(s, f.GoName)
	}
	return s
}

// emitMarshal writes MarshalAppend: the fields in number order, each only
// when the runtime would write it, then the unknown fields.
func emitMarshal(g *protogen.GeneratedFile, m *protogen.Message) {
	name := m.GoIdent.GoName
	fs := byNumber(m)
	g.P("// MarshalAppend appends m's encoding to b. Like the protobuf runtime it")
	g.P("// writes fields in number order and fails on a string that is not valid")
	g.P("// UTF-8.")
	g.P("func (m *", name, ") MarshalAppend(b []byte) ([]byte, error) {")
	g.P("if m == nil {")
	g.P("return b, nil")
	g.P("}")
	for _, f := range fs {
		if f.Desc.Kind() == protoreflect.MessageKind && !f.Desc.IsMap() {
			g.P("var err error")
			break
		}
	}
	for _, f := range fs {
		fq := string(f.Desc.FullName())
		x := "m." + f.GoName
		switch d := f.Desc; {
		case d.IsMap():
			val := f.Message.Fields[1]
			g.P("for _, k := range ", slicesSorted, "(", mapsKeys, "(", x, ")) {")
			g.P("v := ", x, "[k]")
			g.P("if !", utf8ValidString, "(k) {")
			g.P("return nil, invalidUTF8(", quote(fq+".key"), ")")
			g.P("}")
			if val.Desc.Kind() == protoreflect.StringKind {
				g.P("if !", utf8ValidString, "(v) {")
				g.P("return nil, invalidUTF8(", quote(fq+".value"), ")")
				g.P("}")
			}
			g.P("// An entry: its key and value, both always written.")
			g.P("b = ", binaryAppend, "(b, ", tag(f, protowire.BytesType), ")")
			g.P("b = ", binaryAppend, "(b, uint64(2+sizeVarint(uint64(len(k)))+len(k)+sizeVarint(uint64(len(v)))+len(v)))")
			g.P("b = appendString(append(b, 0xa), k)")
			g.P("b = appendString(append(b, 0x12), string(v))")
			g.P("}")
		case d.IsList():
			g.P("for _, v := range ", x, " {")
			emitAppendValue(g, f, "v", fq)
			g.P("}")
		case d.Kind() == protoreflect.MessageKind:
			g.P("if ", x, " != nil {")
			emitAppendValue(g, f, x, fq)
			g.P("}")
		case d.Kind() == protoreflect.BoolKind:
			g.P("if ", x, " {")
			g.P("b = append(", binaryAppend, "(b, ", tag(f, protowire.VarintType), "), 1)")
			g.P("}")
		case d.Kind() == protoreflect.StringKind:
			g.P("if ", x, ` != "" {`)
			emitAppendValue(g, f, x, fq)
			g.P("}")
		case d.Kind() == protoreflect.BytesKind:
			g.P("if len(", x, ") > 0 {")
			emitAppendValue(g, f, x, fq)
			g.P("}")
		default: // a varint
			g.P("if ", x, " != 0 {")
			emitAppendValue(g, f, x, fq)
			g.P("}")
		}
	}
	g.P("return append(b, m.UnknownFields...), nil")
	g.P("}")
	g.P()
}

// emitAppendValue writes the code appending one value v of field f, with
// its tag.
func emitAppendValue(g *protogen.GeneratedFile, f *protogen.Field, v, fq string) {
	switch f.Desc.Kind() {
	case protoreflect.MessageKind:
		g.P("b = ", binaryAppend, "(b, ", tag(f, protowire.BytesType), ")")
		g.P("at := len(b)")
		g.P("b = append(b, 0) // the length, fixed below")
		g.P("if b, err = ", v, ".MarshalAppend(b); err != nil {")
		g.P("return nil, err")
		g.P("}")
		g.P("b = fixLength(b, at)")
	case protoreflect.StringKind:
		g.P("if !", utf8ValidString, "(", v, ") {")
		g.P("return nil, invalidUTF8(", quote(fq), ")")
		g.P("}")
		g.P("b = appendString(", binaryAppend, "(b, ", tag(f, protowire.BytesType), "), ", v, ")")
	case protoreflect.BytesKind:
		g.P("b = appendString(", binaryAppend, "(b, ", tag(f, protowire.BytesType), "), string(", v, "))")
	default:
		// Signed values sign-extend to 64 bits, as the runtime writes them.
		g.P("b = ", binaryAppend, "(", binaryAppend, "(b, ", tag(f, protowire.VarintType), "), uint64(", v, "))")
	}
}

// emitMerge writes merge: decoding b into m as the runtime merges a
// message (last scalar wins, messages merge, repeated fields append).
func emitMerge(g *protogen.GeneratedFile, m *protogen.Message) {
	name := m.GoIdent.GoName
	msg := quote(string(m.Desc.FullName()))
	g.P("func (m *", name, ") merge(b []byte) error {")
	g.P("for len(b) > 0 {")
	g.P("num, typ, n := consumeTag(b, maxFieldNumber)")
	g.P("if n < 0 {")
	g.P("return malformed(", msg, ")")
	g.P("}")
	g.P("b = b[n:]")
	g.P("switch {")
	for _, f := range byNumber(m) {
		fq := string(f.Desc.FullName())
		x := "m." + f.GoName
		wt := wireType(f)
		g.P("case num == ", f.Desc.Number(), " && typ == ", wireName(wt), ":")
		if wt == protowire.VarintType {
			g.P("v, k := consumeVarint(b)")
		} else {
			g.P("v, k := consumeBytes(b)")
		}
		g.P("if k < 0 {")
		g.P("return malformed(", msg, ")")
		g.P("}")
		g.P("b = b[k:]")
		switch d := f.Desc; {
		case d.IsMap():
			emitMergeMapEntry(g, f, msg)
		case d.Kind() == protoreflect.MessageKind && d.IsList():
			g.P("e := &", f.Message.GoIdent.GoName, "{}")
			g.P("if err := e.merge(v); err != nil {")
			g.P("return err")
			g.P("}")
			g.P(x, " = append(", x, ", e)")
		case d.Kind() == protoreflect.MessageKind:
			g.P("if ", x, " == nil {")
			g.P(x, " = &", f.Message.GoIdent.GoName, "{}")
			g.P("}")
			if o := f.Oneof; o != nil {
				var others, nils []string
				for _, of := range o.Fields {
					if of != f {
						others, nils = append(others, "m."+of.GoName), append(nils, "nil")
					}
				}
				if len(others) > 0 {
					g.P(strings.Join(others, ", "), " = ", strings.Join(nils, ", "))
				}
			}
			g.P("if err := ", x, ".merge(v); err != nil {")
			g.P("return err")
			g.P("}")
		case d.Kind() == protoreflect.StringKind:
			g.P("if !", utf8Valid, "(v) {")
			g.P("return invalidUTF8(", quote(fq), ")")
			g.P("}")
			if d.IsList() {
				g.P(x, " = append(", x, ", string(v))")
			} else {
				g.P(x, " = string(v)")
			}
		case d.Kind() == protoreflect.BytesKind:
			if d.IsList() {
				g.P(x, " = append(", x, ", v)")
			} else {
				g.P(x, " = v")
			}
		case d.Kind() == protoreflect.BoolKind:
			g.P(x, " = v != 0")
		case d.Kind() == protoreflect.Uint64Kind:
			g.P(x, " = v")
		case d.Kind() == protoreflect.EnumKind:
			g.P(x, " = ", f.Enum.GoIdent.GoName, "(int32(v))")
		default:
			g.P(x, " = ", scalarType(f), "(v)")
		}
		g.P("continue")
	}
	g.P("}")
	g.P("// A field this code does not know, or of an unexpected wire type: kept.")
	g.P("k := consumeFieldValue(num, typ, b, recursionLimit)")
	g.P("if k < 0 {")
	g.P("return malformed(", msg, ")")
	g.P("}")
	g.P("// The tag written anew (shortest), the value as read, as the runtime keeps it.")
	g.P("m.UnknownFields = append(", binaryAppend, "(m.UnknownFields, uint64(num)<<3|uint64(typ)), b[:k]...)")
	g.P("b = b[k:]")
	g.P("}")
	g.P("return nil")
	g.P("}")
	g.P()
}

// emitMergeMapEntry writes the decoding of one map entry v into field f.
func emitMergeMapEntry(g *protogen.GeneratedFile, f *protogen.Field, msg string) {
	fq := string(f.Desc.FullName())
	val := f.Message.Fields[1]
	g.P("var key string")
	g.P("var val ", scalarType(val))
	g.P("for len(v) > 0 {")
	g.P("en, et, ek := consumeTag(v, maxFieldNumber)")
	g.P("if ek < 0 {")
	g.P("return malformed(", msg, ")")
	g.P("}")
	g.P("v = v[ek:]")
	g.P("if (en == 1 || en == 2) && et == wireBytes {")
	g.P("ev, ek := consumeBytes(v)")
	g.P("if ek < 0 {")
	g.P("return malformed(", msg, ")")
	g.P("}")
	g.P("v = v[ek:]")
	g.P("if en == 1 {")
	g.P("if !", utf8Valid, "(ev) {")
	g.P("return invalidUTF8(", quote(fq+".key"), ")")
	g.P("}")
	g.P("key = string(ev)")
	g.P("} else {")
	if val.Desc.Kind() == protoreflect.StringKind {
		g.P("if !", utf8Valid, "(ev) {")
		g.P("return invalidUTF8(", quote(fq+".value"), ")")
		g.P("}")
		g.P("val = string(ev)")
	} else {
		g.P("val = ev")
	}
	g.P("}")
	g.P("continue")
	g.P("}")
	g.P("ek = consumeFieldValue(en, et, v, recursionLimit)")
	g.P("if ek < 0 {")
	g.P("return malformed(", msg, ")")
	g.P("}")
	g.P("v = v[ek:]")
	g.P("}")
	g.P("if ", "m.", f.GoName, " == nil {")
	g.P("m.", f.GoName, " = ", goType(f), "{}")
	g.P("}")
	g.P("m.", f.GoName, "[key] = val")
}

// wireName is the generated code's name of a wire type.
func wireName(t protowire.Type) string {
	if t == protowire.VarintType {
		return "wireVarint"
	}
	return "wireBytes"
}

func quote(s string) string { return fmt.Sprintf("%q", s) }
