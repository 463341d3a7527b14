package files

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/runbox/runbox"
)

// Matcher matches slash paths, relative to a sync's root, against
// .gitignore-style patterns:
//
//   - a blank line or one starting with # is ignored; "\#" and "\!" escape;
//   - "!" negates: a later negated pattern re-includes what an earlier one
//     excluded (the last matching pattern wins), except beneath an excluded
//     directory, which is never entered;
//   - a trailing "/" matches directories only;
//   - a pattern with a "/" at its start or middle is anchored to the root;
//     otherwise it matches a name at any depth;
//   - "*" and "?" match within a name, "[...]" a class, "**" any number of
//     directories ("**/x", "x/**", "a/**/b").
//
// It is a small translation to regular expressions written for runbox
// rather than a dependency: the gitignore packages available either pull in
// a whole git implementation (go-git) or are unmaintained, and the rules
// above fit in a hundred lines that the tests cover.
type Matcher struct {
	rules []ignoreRule
}

type ignoreRule struct {
	re      *regexp.Regexp
	negate  bool
	dirOnly bool
}

// NewMatcher compiles patterns; a nil or empty list matches nothing.
func NewMatcher(patterns []string) (*Matcher, error) {
	m := &Matcher{}
	for _, p := range patterns {
		r, ok, err := compileIgnore(p)
		if err != nil {
			return nil, fmt.Errorf("exclude pattern %q: %w: %v", p, runbox.ErrInvalidSpec, err)
		}
		if ok {
			m.rules = append(m.rules, r)
		}
	}
	return m, nil
}

func compileIgnore(p string) (ignoreRule, bool, error) {
	var r ignoreRule
	// Trailing spaces are dropped unless escaped.
	for strings.HasSuffix(p, " ") && !strings.HasSuffix(p, `\ `) {
		p = p[:len(p)-1]
	}
	if p == "" || strings.HasPrefix(p, "#") {
		return r, false, nil
	}
	if strings.HasPrefix(p, "!") {
		r.negate = true
		p = p[1:]
	} else if strings.HasPrefix(p, `\!`) || strings.HasPrefix(p, `\#`) {
		p = p[1:]
	}
	if strings.HasSuffix(p, "/") {
		r.dirOnly = true
		p = strings.TrimRight(p, "/")
	}
	if p == "" {
		return r, false, nil
	}
	anchored := strings.Contains(p, "/")
	p = strings.TrimPrefix(p, "/")
	var b strings.Builder
	b.WriteString("^")
	if !anchored {
		b.WriteString("(?:.*/)?")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && strings.HasPrefix(p[i:], "**"):
			atStart := i == 0 || p[i-1] == '/'
			rest := p[i+2:]
			switch {
			case atStart && strings.HasPrefix(rest, "/"):
				b.WriteString("(?:.*/)?") // "**/": zero or more directories
				i += 2
			case atStart && rest == "" && i > 0:
				b.WriteString(".*") // "x/**": everything inside
				i++
			default:
				b.WriteString(".*")
				i++
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(p[i+1:], ']')
			if j < 0 {
				return r, false, fmt.Errorf("unterminated [")
			}
			class := p[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(string(p[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return r, false, err
	}
	r.re = re
	return r, true, nil
}

// match reports the verdict of the last rule matching rel itself.
func (m *Matcher) match(rel string, isDir bool) bool {
	excluded := false
	for _, r := range m.rules {
		if r.dirOnly && !isDir {
			continue
		}
		if r.re.MatchString(rel) {
			excluded = !r.negate
		}
	}
	return excluded
}

// Excluded reports whether rel (a slash path relative to the root) is
// excluded: matched by the patterns itself, or beneath an excluded
// directory.
func (m *Matcher) Excluded(rel string, isDir bool) bool {
	if m == nil || len(m.rules) == 0 {
		return false
	}
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if m.match(d, true) {
			return true
		}
	}
	return m.match(rel, isDir)
}

// ExcludedHere is Excluded for a walk, which never enters excluded
// directories, so only rel itself needs checking.
func (m *Matcher) excludedHere(rel string, isDir bool) bool {
	if m == nil || len(m.rules) == 0 {
		return false
	}
	return m.match(rel, isDir)
}
