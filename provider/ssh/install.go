package ssh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/runbox/runbox/internal/runboxdbin"
)

// machines maps an ELF machine to the names `uname -m` gives it, and the
// GOARCH that builds for it.
var machines = map[elf.Machine]struct {
	uname  []string
	goarch string
}{
	elf.EM_X86_64:    {[]string{"x86_64", "amd64"}, "amd64"},
	elf.EM_AARCH64:   {[]string{"aarch64", "arm64", "aarch64_be"}, "arm64"},
	elf.EM_386:       {[]string{"i386", "i486", "i586", "i686", "x86"}, "386"},
	elf.EM_ARM:       {[]string{"armv5l", "armv6l", "armv7l", "armv8l", "arm"}, "arm"},
	elf.EM_RISCV:     {[]string{"riscv64"}, "riscv64"},
	elf.EM_PPC64:     {[]string{"ppc64le", "ppc64"}, "ppc64le"},
	elf.EM_S390:      {[]string{"s390x"}, "s390x"},
	elf.EM_LOONGARCH: {[]string{"loongarch64"}, "loong64"},
}

// goarchFor returns the GOARCH that builds for a `uname -m` machine, or "".
func goarchFor(uname string) string {
	for _, m := range machines {
		if slices.Contains(m.uname, uname) {
			return m.goarch
		}
	}
	return ""
}

// binary is a runboxd binary read from this machine.
type binary struct {
	path    string
	data    []byte
	sum     string // SHA-256, hex
	machine elf.Machine
}

// readBinary reads and checks runboxd: a static Linux executable.
func readBinary(path string) (*binary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read runboxd: %w", err)
	}
	if err := runboxdbin.CheckStatic(data, path); err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("runboxd %s is not a Linux executable: %w", path, err)
	}
	machine := f.Machine
	f.Close()
	s := sha256.Sum256(data)
	return &binary{path: path, data: data, sum: hex.EncodeToString(s[:]), machine: machine}, nil
}

// install makes sure the remote user's cache holds b, checked by SHA-256,
// and returns its remote path. A binary for another architecture than the
// host's is refused before anything is copied. It uploads at most once per
// version: a cached copy whose SHA-256 matches is used as it is.
func (l *link) install(ctx context.Context, b *binary) (string, error) {
	l.installMu.Lock()
	defer l.installMu.Unlock()
	if p, ok := l.verified[b.sum]; ok {
		return p, nil
	}
	out, err := l.run(ctx, "probe the host", probeScript, nil, b.sum)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		return "", fmt.Errorf("probe the host: unexpected answer %q", out)
	}
	arch, cache, cached := lines[0], lines[1], lines[2]
	m, known := machines[b.machine]
	if !known || !slices.Contains(m.uname, arch) {
		hint := ""
		if g := goarchFor(arch); g != "" {
			hint = fmt.Sprintf(": build one for it (CGO_ENABLED=0 GOARCH=%s go build -o runboxd-%s ./cmd/runboxd) and name it in RUNBOX_RUNBOXD", g, g)
		}
		return "", fmt.Errorf("%w: %s is %s (uname -m), but runboxd %s is built for %s%s",
			ErrArchMismatch, l.ep.addr(), arch, b.path, strings.TrimPrefix(b.machine.String(), "EM_"), hint)
	}
	path := cache + "/runboxd-" + b.sum
	if cached != b.sum {
		if _, err := l.run(ctx, "upload runboxd", installScript, bytes.NewReader(b.data), b.sum, strconv.Itoa(len(b.data))); err != nil {
			return "", err
		}
	}
	if l.verified == nil {
		l.verified = make(map[string]string)
	}
	l.verified[b.sum] = path
	return path, nil
}
