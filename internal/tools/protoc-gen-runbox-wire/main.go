// Command protoc-gen-runbox-wire is a protoc plugin that generates plain Go
// types, with their protobuf encoding and decoding, for chosen messages of
// proto/: code that imports only the standard library (encoding/binary for
// varints), for the runbox front (internal/front), which must not pay the
// protobuf runtime's package init on every command.
//
// Each option msg=FULL.NAME picks a root message; the messages and enums it
// reaches are generated with it. For a .proto file of Go package P at
// import path I, the code goes to DIR/Pwire/BASE.wire.go (package Pwire,
// import path I/Pwire) beside the file's other generated code, and the
// package's helpers to DIR/Pwire/Pwire.wire.go.
//
// The code follows the protobuf runtime's rules for proto3 (what it writes
// decodes, with the runtime, to an equal message, and it reads what the
// runtime writes, unknown fields kept, and refuses what the runtime
// refuses), except that bytes fields alias the decoded buffer rather than
// copying it. It supports the field kinds the chosen messages use (bool,
// int32, int64, uint32, uint64, enums, strings, bytes and messages,
// repeated strings, bytes and messages, map<string, string|bytes>, and
// oneofs of messages) and fails on any other, so a new kind is a generator
// change rather than wrong code. Its tests compare it with the runtime.
//
// It is registered in buf.gen.yaml and run by `go generate .`.
package main

import (
	"fmt"
	"path"
	"slices"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() {
	var roots []string
	protogen.Options{ParamFunc: func(name, value string) error {
		if name != "msg" {
			return fmt.Errorf("protoc-gen-runbox-wire: unknown option %q (want msg=FULL.NAME)", name)
		}
		roots = append(roots, value)
		return nil
	}}.Run(func(gen *protogen.Plugin) error { return generate(gen, roots) })
}

// selection is the messages and enums to generate, by full name.
type selection struct {
	messages map[protoreflect.FullName]bool
	enums    map[protoreflect.FullName]bool
}

// generate writes the code for the messages roots reach.
func generate(gen *protogen.Plugin, roots []string) error {
	if len(roots) == 0 {
		return fmt.Errorf("protoc-gen-runbox-wire: no msg=FULL.NAME option: nothing to generate")
	}
	all := map[protoreflect.FullName]*protogen.Message{}
	for _, f := range gen.Files {
		walkMessages(f.Messages, func(m *protogen.Message) { all[m.Desc.FullName()] = m })
	}
	sel := selection{messages: map[protoreflect.FullName]bool{}, enums: map[protoreflect.FullName]bool{}}
	for _, r := range roots {
		m, ok := all[protoreflect.FullName(r)]
		if !ok {
			return fmt.Errorf("protoc-gen-runbox-wire: message %s not found", r)
		}
		if err := sel.add(m); err != nil {
			return err
		}
	}
	helpers := map[protogen.GoImportPath]bool{}
	for _, f := range gen.Files {
		var msgs []*protogen.Message
		walkMessages(f.Messages, func(m *protogen.Message) {
			if sel.messages[m.Desc.FullName()] {
				msgs = append(msgs, m)
			}
		})
		var enums []*protogen.Enum
		for _, e := range f.Enums {
			if sel.enums[e.Desc.FullName()] {
				enums = append(enums, e)
			}
		}
		walkMessages(f.Messages, func(m *protogen.Message) {
			for _, e := range m.Enums {
				if sel.enums[e.Desc.FullName()] {
					enums = append(enums, e)
				}
			}
		})
		if len(msgs) == 0 && len(enums) == 0 {
			continue
		}
		if !f.Generate {
			return fmt.Errorf("protoc-gen-runbox-wire: %s reaches into %s, which is not being generated", roots, f.Desc.Path())
		}
		if f.Desc.Syntax() != protoreflect.Proto3 {
			return fmt.Errorf("protoc-gen-runbox-wire: %s is not proto3 (only proto3's rules are implemented)", f.Desc.Path())
		}
		pkg := string(f.GoPackageName) + "wire"
		dir := path.Join(path.Dir(f.GeneratedFilenamePrefix), pkg)
		importPath := f.GoImportPath + protogen.GoImportPath("/"+pkg)
		if !helpers[importPath] {
			helpers[importPath] = true
			emitHelpers(gen.NewGeneratedFile(path.Join(dir, pkg+".wire.go"), importPath), f, pkg)
		}
		g := gen.NewGeneratedFile(path.Join(dir, path.Base(f.GeneratedFilenamePrefix)+".wire.go"), importPath)
		emitHeader(g, f, pkg)
		for _, e := range enums {
			emitEnum(g, e)
		}
		for _, m := range msgs {
			if err := emitMessage(g, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// walkMessages calls fn for every message in msgs and the messages nested
// in them (map entries excepted).
func walkMessages(msgs []*protogen.Message, fn func(*protogen.Message)) {
	for _, m := range msgs {
		if m.Desc.IsMapEntry() {
			continue
		}
		fn(m)
		walkMessages(m.Messages, fn)
	}
}

// add selects m and everything its fields reach, checking that each field
// is of a supported kind.
func (s selection) add(m *protogen.Message) error {
	name := m.Desc.FullName()
	if s.messages[name] {
		return nil
	}
	s.messages[name] = true
	for _, f := range m.Fields {
		if err := supported(f); err != nil {
			return err
		}
		switch {
		case f.Desc.IsMap():
			// map<string, string|bytes>: nothing to reach.
		case f.Message != nil:
			if f.Message.GoIdent.GoImportPath != m.GoIdent.GoImportPath {
				return fmt.Errorf("protoc-gen-runbox-wire: %s is a message of another Go package (%s), which is not supported", f.Desc.FullName(), f.Message.Desc.FullName())
			}
			if err := s.add(f.Message); err != nil {
				return err
			}
		case f.Enum != nil:
			if f.Enum.GoIdent.GoImportPath != m.GoIdent.GoImportPath {
				return fmt.Errorf("protoc-gen-runbox-wire: %s is an enum of another Go package, which is not supported", f.Desc.FullName())
			}
			s.enums[f.Enum.Desc.FullName()] = true
		}
	}
	return nil
}

// varintKinds are the scalar kinds generated, all varints.
var varintKinds = []protoreflect.Kind{
	protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind,
	protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind,
}

// supported reports an error for a field this generator cannot encode.
func supported(f *protogen.Field) error {
	d := f.Desc
	k := d.Kind()
	bad := func(what string) error {
		return fmt.Errorf("protoc-gen-runbox-wire: %s: %s is not supported (teach internal/tools/protoc-gen-runbox-wire)", d.FullName(), what)
	}
	switch {
	case d.HasPresence() && f.Oneof != nil && f.Oneof.Desc.IsSynthetic():
		return bad("proto3 optional")
	case f.Oneof != nil && k != protoreflect.MessageKind:
		return bad("a oneof member that is not a message")
	case d.IsMap():
		kk, vk := d.MapKey().Kind(), d.MapValue().Kind()
		if kk != protoreflect.StringKind || (vk != protoreflect.StringKind && vk != protoreflect.BytesKind) {
			return bad(fmt.Sprintf("map<%s, %s>", kk, vk))
		}
	case d.IsList():
		if k != protoreflect.StringKind && k != protoreflect.BytesKind && k != protoreflect.MessageKind {
			return bad("repeated " + k.String())
		}
	case k == protoreflect.StringKind, k == protoreflect.BytesKind, k == protoreflect.MessageKind:
	case slices.Contains(varintKinds, k):
	default:
		return bad("kind " + k.String())
	}
	return nil
}
