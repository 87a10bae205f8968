// Package subpath answers one question the host asks of paths it is given:
// does this path lie strictly below that directory, and by what relative
// path. Lexically, on clean absolute paths: resolving symbolic links is
// the caller's (skills resolves them first; the session runtime refuses
// them on its own directories).
package subpath

import "path/filepath"

// Rel returns p's path relative to dir and true when p lies strictly
// below dir (never dir itself, never beside or above it); both are
// absolute and clean. The relative path is slash-separated.
func Rel(dir, p string) (string, bool) {
	if !filepath.IsAbs(dir) || !filepath.IsAbs(p) || filepath.Clean(dir) != dir || filepath.Clean(p) != p {
		return "", false
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == "." || !filepath.IsLocal(rel) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// Below reports whether p lies strictly below dir (Rel).
func Below(dir, p string) bool {
	_, ok := Rel(dir, p)
	return ok
}
