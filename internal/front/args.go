package front

import (
	"strconv"
	"strings"
	"time"

	"github.com/runbox/runbox/internal/execrules"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// execArgs is an exec invocation the front runs itself.
type execArgs struct {
	flags   execrules.Flags
	key     string   // the sandbox's id or name, as given
	command []string // COMMAND...
}

// parseExec reads exec's arguments (after "exec") as runbox-full's flag
// parser does (flags up to COMMAND's first word, the rest the command's), and reports whether the front runs the invocation itself:
// only flags execrules.Defs marks as the front's (a bool one only true), a
// sandbox named by the form of an id or of a name, and a command. Anything else,
// --help, an unknown flag or a bad value among them, is runbox-full's.
func parseExec(args []string) (execArgs, bool) {
	x := execArgs{flags: execrules.NewFlags()}
	var operands []string
	dash := -1 // operands before "--"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			dash = len(operands)
			operands = append(operands, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a[2:], "=")
			d, ok := frontDef(name, "")
			if !ok {
				return x, false
			}
			if d.Kind != execrules.Bool && !hasValue {
				if i+1 >= len(args) {
					return x, false
				}
				i++
				value, hasValue = args[i], true
			}
			if !x.set(d, value, hasValue) {
				return x, false
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			d, ok := frontDef("", a[1:2])
			if !ok || d.Kind == execrules.Bool {
				return x, false
			}
			value := strings.TrimPrefix(a[2:], "=")
			if len(a) == 2 {
				if i+1 >= len(args) {
					return x, false
				}
				i++
				value = args[i]
			}
			if !x.set(d, value, true) {
				return x, false
			}
		default:
			operands = append(operands, a)
			if len(operands) == 2 {
				// COMMAND's first word: from here every argument is
				// the command's, as docker exec has it.
				operands = append(operands, args[i+1:]...)
				i = len(args)
			}
		}
	}
	if dash < 0 {
		dash = min(1, len(operands))
	}
	if dash != 1 || len(operands) < 2 || !sandboxkey.ValidID(operands[0]) && !sandboxkey.ValidName(operands[0]) {
		return x, false
	}
	x.key, x.command = operands[0], operands[1:]
	return x, true
}

// frontDef finds the flag with the long name or shorthand given, if the
// front handles it.
func frontDef(name, short string) (execrules.Def, bool) {
	for _, d := range execrules.Defs {
		if d.Front && (name != "" && d.Name == name || short != "" && d.Short == short) {
			return d, true
		}
	}
	return execrules.Def{}, false
}

// set stores a flag's value as the flag parser would, and reports whether
// the front handles it: a bool flag only true.
func (x *execArgs) set(d execrules.Def, value string, hasValue bool) bool {
	switch p := x.flags.Target(d.Name).(type) {
	case *time.Duration:
		v, err := time.ParseDuration(value)
		if err != nil {
			return false
		}
		*p = v
		if d.Name == "grace" {
			x.flags.GraceSet = true
		}
	case *string:
		*p = value
	case *[]string:
		*p = append(*p, value)
	case *bool:
		v := true
		if hasValue {
			var err error
			if v, err = strconv.ParseBool(value); err != nil {
				return false
			}
		}
		if !v {
			return false
		}
		*p = v
	}
	return true
}
