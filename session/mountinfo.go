package session

import (
	"slices"
	"strconv"
	"strings"
)

// mountInfo is one line of /proc/self/mountinfo (proc(5)).
type mountInfo struct {
	major, minor uint32 // the filesystem's device
	point        string // the mount point, unescaped
	options      string // per-mount options: rw,nosuid,nodev,noexec …
	fsType       string
	source       string
}

// parseMountInfo parses one mountinfo line:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// ok is false for a line that does not have this shape.
func parseMountInfo(line string) (m mountInfo, ok bool) {
	fields := strings.Fields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+2 >= len(fields) {
		return mountInfo{}, false
	}
	maj, min, found := strings.Cut(fields[2], ":")
	major, err1 := strconv.ParseUint(maj, 10, 32)
	minor, err2 := strconv.ParseUint(min, 10, 32)
	if !found || err1 != nil || err2 != nil {
		return mountInfo{}, false
	}
	point, ok := unescapeMount(fields[4])
	if !ok {
		return mountInfo{}, false
	}
	return mountInfo{
		major: uint32(major), minor: uint32(minor), point: point, options: fields[5],
		fsType: fields[sep+1], source: fields[sep+2],
	}, true
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space, \011,
// \012, \134); ok is false for a malformed escape.
func unescapeMount(s string) (string, bool) {
	if !strings.Contains(s, `\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), true
}

// hasOptions reports whether the comma-separated opts hold every one of
// want.
func hasOptions(opts string, want ...string) bool {
	have := strings.Split(opts, ",")
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// lastMountAt is the mount on top at point (the last one listed), if any.
func lastMountAt(mounts []mountInfo, point string) (mountInfo, bool) {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].point == point {
			return mounts[i], true
		}
	}
	return mountInfo{}, false
}
