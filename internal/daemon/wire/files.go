package wire

import (
	"io/fs"
	"time"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// permBits are the mode bits a FileInfo carries on the wire besides its
// type: permissions plus setuid, setgid and sticky.
const permBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// ModeToProto converts the permission, setuid, setgid and sticky bits of m
// to their chmod(2) encoding.
func ModeToProto(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// ModeFromProto converts chmod(2) bits to an fs.FileMode without type bits.
func ModeFromProto(u uint32) fs.FileMode {
	m := fs.FileMode(u & 0o777)
	if u&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if u&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if u&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// FileInfoToProto converts a runbox.FileInfo.
func FileInfoToProto(fi runbox.FileInfo) *runboxv1.FileInfo {
	t := runboxv1.FileType_FILE_TYPE_REGULAR
	switch {
	case fi.Mode.IsDir():
		t = runboxv1.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode&fs.ModeSymlink != 0:
		t = runboxv1.FileType_FILE_TYPE_SYMLINK
	case !fi.Mode.IsRegular():
		t = runboxv1.FileType_FILE_TYPE_OTHER
	}
	var mtime int64
	if !fi.ModTime.IsZero() {
		mtime = fi.ModTime.UnixNano()
	}
	return &runboxv1.FileInfo{
		Path:       []byte(fi.Path),
		Type:       t,
		Mode:       ModeToProto(fi.Mode & permBits),
		Size:       fi.Size,
		MtimeNs:    mtime,
		LinkTarget: []byte(fi.LinkTarget),
		Sha256:     fi.SHA256,
	}
}

// FileInfoFromProto converts a wire FileInfo.
func FileInfoFromProto(p *runboxv1.FileInfo) runbox.FileInfo {
	m := ModeFromProto(p.GetMode())
	switch p.GetType() {
	case runboxv1.FileType_FILE_TYPE_DIRECTORY:
		m |= fs.ModeDir
	case runboxv1.FileType_FILE_TYPE_SYMLINK:
		m |= fs.ModeSymlink
	case runboxv1.FileType_FILE_TYPE_OTHER:
		m |= fs.ModeIrregular
	}
	var mtime time.Time
	if ns := p.GetMtimeNs(); ns != 0 {
		mtime = time.Unix(0, ns)
	}
	return runbox.FileInfo{
		Path:       string(p.GetPath()),
		Mode:       m,
		Size:       p.GetSize(),
		ModTime:    mtime,
		LinkTarget: string(p.GetLinkTarget()),
		SHA256:     p.GetSha256(),
	}
}
