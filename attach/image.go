package attach

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// SniffImage returns the image type of data from its magic bytes alone,
// and ok false when data starts like none of the four types of docs/protocol.md, "Images and files"
// (rtsandbox.SniffImage, which the worker shares).
func SniffImage(data []byte) (mimeType string, ok bool) {
	return rtsandbox.SniffImage(data)
}

// RawImage is an image as it arrives: its bytes and the type its sender
// declared ("" when none, e.g. a Discord attachment without a content
// type).
type RawImage struct {
	Data     []byte
	Declared string
}

// CheckImage checks one image (see the package doc) and returns it as
// the base64 wire.Image of a turn. declared may carry parameters
// ("image/png; x=y") and any case; "" means no declared type.
func CheckImage(data []byte, declared string) (wire.Image, error) {
	mimeType, err := sniffChecked(data, declared)
	if err != nil {
		return wire.Image{}, err
	}
	return wire.Image{Data: base64.StdEncoding.EncodeToString(data), MIMEType: mimeType}, nil
}

// CheckImages checks a turn's images in order: the count first, then each
// image and the running total, and encodes them only when all pass, so a
// refused set costs no base64 copies.
func CheckImages(images []RawImage) ([]wire.Image, error) {
	if len(images) > rtsandbox.MaxImages {
		return nil, fmt.Errorf("%w: %d images, at most %d", wire.ErrTooManyImages, len(images), rtsandbox.MaxImages)
	}
	types := make([]string, len(images))
	total := 0
	for i, im := range images {
		mimeType, err := sniffChecked(im.Data, im.Declared)
		if err != nil {
			return nil, fmt.Errorf("image %d: %w", i+1, err)
		}
		types[i] = mimeType
		if total += len(im.Data); total > rtsandbox.MaxImagesTotal {
			return nil, fmt.Errorf("%w: more than %d bytes in total", wire.ErrImageBudget, rtsandbox.MaxImagesTotal)
		}
	}
	out := make([]wire.Image, len(images))
	for i, im := range images {
		out[i] = wire.Image{Data: base64.StdEncoding.EncodeToString(im.Data), MIMEType: types[i]}
	}
	return out, nil
}

// sniffChecked applies the size, type and declared-type rules to one
// image and returns its sniffed type.
func sniffChecked(data []byte, declared string) (string, error) {
	if len(data) < 1 || len(data) > rtsandbox.MaxImageBytes {
		return "", fmt.Errorf("%w: %d bytes, must be 1 to %d", wire.ErrImage, len(data), rtsandbox.MaxImageBytes)
	}
	sniffed, ok := SniffImage(data)
	if !ok {
		return "", fmt.Errorf("%w: not a PNG, JPEG, GIF or WebP image", wire.ErrImage)
	}
	if d := mediaType(declared); d != "" && d != sniffed {
		return "", fmt.Errorf("%w: declared %q but the content is %s", wire.ErrImage, d, sniffed)
	}
	return sniffed, nil
}

// mediaType is declared before any ';', trimmed and lowercased (docs/session.md, "Attachments in, reply files out"
// step 11); "" means no declared type.
func mediaType(declared string) string {
	t, _, _ := strings.Cut(declared, ";")
	return strings.ToLower(strings.TrimSpace(t))
}
