package modelapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// This file widens the /model rule for session mode, where a turn carries
// images (docs/protocol.md, "Images and files"): with ChatOptions.ImageParts a user message's
// content may be an array of text parts and image_url parts whose url is a
// base64 data URL of one of the four image types. A remote URL (which the
// provider would fetch on the guest's behalf), any other part type
// (file, input_audio, …), any other key, and parts in a system, assistant
// or tool message stay refused.

// Bounds of the content parts of one request.
const (
	// MaxContentParts bounds the parts of one message: the worker sends
	// at most eight images and one text.
	MaxContentParts = 32
)

// dataURLPrefixes are the data URL heads of the four image types: exactly
// these bytes, lowercase, base64 and no other parameter.
var dataURLPrefixes = map[string]string{
	"data:image/png;base64,":  rtsandbox.MIMEPNG,
	"data:image/jpeg;base64,": rtsandbox.MIMEJPEG,
	"data:image/webp;base64,": rtsandbox.MIMEWebP,
	"data:image/gif;base64,":  rtsandbox.MIMEGIF,
}

// ChatOptions widen NormalizeChatWith beyond the sealed rule.
type ChatOptions struct {
	// ImageParts admits content-part arrays in user messages: text parts
	// {type:"text", text} and image parts {type:"image_url",
	// image_url:{url}} whose url is a data URL ParseImageDataURL accepts,
	// at most rtsandbox.MaxImages images of at most
	// rtsandbox.MaxImagesTotal decoded bytes in one request.
	ImageParts bool
	// Budget bounds the body's decoding (jsontree.Budget): the broker's,
	// of the body's size and stopped by the call's context. nil means one
	// of the body's size that never stops.
	Budget *jsontree.Budget
}

// ContentPart is one rebuilt part of a user message's content: Text is set
// for a text part, ImageURL for an image part.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     *string   `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
}

// ImageURL is an image part's image: a data URL, rebuilt from the parsed
// type and data.
type ImageURL struct {
	URL string `json:"url"`
}

// ImageDataURL is the data URL of one image.
func ImageDataURL(mimeType, data string) string {
	return "data:" + mimeType + ";base64," + data
}

// ParseImageDataURL reads "data:image/<png|jpeg|webp|gif>;base64,<data>"
// with exactly that head and data that passes docs/protocol.md, "Images and files" (padded standard
// base64 of 1 byte to rtsandbox.MaxImageBytes decoded). It decodes
// nothing.
func ParseImageDataURL(url string) (mimeType, data string, ok bool) {
	head, rest, found := strings.Cut(url, ",")
	if !found {
		return "", "", false
	}
	mimeType, ok = dataURLPrefixes[head+","]
	if !ok || !validImage(rest, mimeType) {
		return "", "", false
	}
	return mimeType, rest, true
}

// imageTally counts a request's images against docs/protocol.md, "Images and files".
type imageTally struct {
	count, bytes int
}

// add counts one image of data (validated base64).
func (t *imageTally) add(data string) error {
	t.count++
	t.bytes += len(data)/4*3 - (len(data) - len(strings.TrimRight(data, "=")))
	switch {
	case t.count > rtsandbox.MaxImages:
		return fmt.Errorf("more than %d images", rtsandbox.MaxImages)
	case t.bytes > rtsandbox.MaxImagesTotal:
		return fmt.Errorf("images over %d bytes in total", rtsandbox.MaxImagesTotal)
	}
	return nil
}

// The members of a part: type and text (a text part) or type and
// image_url (an image part), whose only member is url.
var (
	partFields     = []string{"type", "text", "image_url"}
	imageURLFields = []string{"url"}
)

// contentParts rebuilds a user message's content array, read through
// views: a part holding a 20 MiB data URL is scanned once per level
// (content, part, image_url) and decoded once, and an array of more than
// MaxContentParts is refused at the count.
func contentParts(b *jsontree.Budget, raw json.RawMessage, tally *imageTally) ([]ContentPart, error) {
	items, n, ok := b.Array(raw, MaxContentParts)
	if !ok {
		return nil, errors.New("content is not a string or an array of parts")
	}
	if n > MaxContentParts {
		return nil, fmt.Errorf("more than %d content parts", MaxContentParts)
	}
	parts := make([]ContentPart, 0, len(items))
	for i, item := range items {
		p, err := contentPart(b, item, tally)
		if err != nil {
			return nil, fmt.Errorf("content[%d]: %w", i, err)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// contentPart rebuilds one part: text, or an image given as a data URL.
// Any member but the part's own is refused.
func contentPart(b *jsontree.Budget, item json.RawMessage, tally *imageTally) (ContentPart, error) {
	var obj [3]json.RawMessage // type, text, image_url
	if kind(item) != '{' {
		return ContentPart{}, errors.New("not an object")
	}
	other, hasOther, ok := b.Fields(item, partFields, obj[:])
	if !ok {
		return ContentPart{}, errors.New("not an object")
	}
	typ, _ := asString(b, obj[0])
	switch typ {
	case "text":
		if key, bad := firstOther(other, hasOther, "image_url", obj[2] != nil); bad {
			return ContentPart{}, notAllowed(key)
		}
		text, ok := asString(b, obj[1])
		if !ok {
			return ContentPart{}, errors.New("text is not a string")
		}
		return ContentPart{Type: "text", Text: &text}, nil
	case "image_url":
		if key, bad := firstOther(other, hasOther, "text", obj[1] != nil); bad {
			return ContentPart{}, notAllowed(key)
		}
		var img [1]json.RawMessage
		if kind(obj[2]) != '{' {
			return ContentPart{}, errors.New("image_url is not an object")
		}
		other, hasOther, ok := b.Fields(obj[2], imageURLFields, img[:])
		if !ok {
			return ContentPart{}, errors.New("image_url is not an object")
		}
		if hasOther {
			return ContentPart{}, fmt.Errorf("image_url: %w", notAllowed(other))
		}
		url, _ := asString(b, img[0])
		mimeType, data, ok := ParseImageDataURL(url)
		if !ok {
			return ContentPart{}, errors.New("image_url.url is not a base64 data URL of a PNG, JPEG, WebP or GIF image within the image bounds")
		}
		if err := tally.add(data); err != nil {
			return ContentPart{}, err
		}
		return ContentPart{Type: "image_url", ImageURL: &ImageURL{URL: ImageDataURL(mimeType, data)}}, nil
	}
	return ContentPart{}, errors.New("part type is not text or image_url")
}

// firstOther is the least key a part may not carry: the least of the
// members no part type lists (other, when hasOther) and the other part
// type's member (sibling, when present).
func firstOther(other string, hasOther bool, sibling string, present bool) (string, bool) {
	switch {
	case present && (!hasOther || sibling < other):
		return sibling, true
	case hasOther:
		return other, true
	}
	return "", false
}

// MarshalJSON writes the message in the wire order role, content,
// tool_calls, tool_call_id, with content the parts when there are any.
func (m Message) MarshalJSON() ([]byte, error) {
	type wire struct {
		Role       string     `json:"role"`
		Content    any        `json:"content"`
		ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	var content any = m.Content
	if m.Parts != nil {
		content = m.Parts
	}
	return jsonjs.Marshal(wire{Role: m.Role, Content: content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID})
}
