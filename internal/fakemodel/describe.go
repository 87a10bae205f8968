package fakemodel

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// The image script: "describe the image" answers with what the request
// showed the model, read from its image parts in either dialect (chat
// image_url data URLs, Messages image blocks, tool results' images
// included): how many, and each one's media type and decoded size. It
// decodes nothing: the size comes from the base64 text (rtsandbox.Base64Size),
// so a hostile part costs one pass over its text and no memory.

// Texts of the image script, exported so tests can compare.
const (
	DescribeNone   = "I was shown no images in this message."
	describeOne    = "I was shown 1 image:"
	describeMany   = "I was shown %d images:"
	describeMore   = "\n- … and %d more."
	describeLinked = "a linked image (%s), not inline data"
	describeBad    = "%s, not valid base64 data"
)

// maxDescribed bounds the images the answer lists one by one; a message
// carries at most rtsandbox.MaxImages, a tool result a few more.
const maxDescribed = 20

// maxMediaType bounds a media type as the answer repeats it.
const maxMediaType = 64

var (
	describeImages = regexp.MustCompile(`(?i)\b(?:describe|look\s+at)\b[^\n]*\b(?:images?|pictures?|photos?)\b`)
	// mediaType is what the answer repeats of a part's declared type;
	// anything else is named as not a media type.
	mediaType = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9!#$&^_.+-]*/[a-zA-Z0-9][a-zA-Z0-9!#$&^_.+-]*$`)
	// shownLine is a line of the session host's attachments block for a
	// file shown as an image (attach.Block): its quoted name first.
	shownLine = regexp.MustCompile(`^- ("(?:[^"\\\n]|\\.){1,400}")(?: \(from the replied-to message\))?: [^\n]*; shown to you as an image$`)
)

// imageScript answers "describe the image(s)"; ok is false for any other
// message.
func imageScript(req Request) (Response, bool) {
	if req.Last().Role == "tool" || !describeImages.MatchString(req.UserText()) {
		return Response{}, false
	}
	return Response{Content: describe(req)}, true
}

// describe lists the request's images with the names the session host's
// attachments block gives the last user message's images, when it names
// exactly as many as that message carries.
func describe(req Request) string {
	images := req.Images()
	if len(images) == 0 {
		return DescribeNone
	}
	names := shownNames(req)
	var b strings.Builder
	if len(images) == 1 {
		b.WriteString(describeOne)
	} else {
		fmt.Fprintf(&b, describeMany, len(images))
	}
	for i, im := range images[:min(len(images), maxDescribed)] {
		fmt.Fprintf(&b, "\n- image %d: %s", i+1, describeImage(im))
		if name, ok := names[i]; ok {
			b.WriteString(", attached as " + name)
		}
	}
	if len(images) > maxDescribed {
		fmt.Fprintf(&b, describeMore, len(images)-maxDescribed)
	}
	b.WriteString(".")
	return b.String()
}

// DescribeImage is how the image script describes one image part, such
// as "image/png, 68 bytes".
func DescribeImage(mimeType string, size int) string {
	return typeOf(mimeType) + ", " + strconv.Itoa(size) + " bytes"
}

func describeImage(im Image) string {
	if im.Data == "" && im.URL != "" {
		return fmt.Sprintf(describeLinked, typeOf(im.MIMEType))
	}
	n, ok := rtsandbox.Base64Size(im.Data, rtsandbox.MaxSessionRequest)
	if !ok {
		return fmt.Sprintf(describeBad, typeOf(im.MIMEType))
	}
	return DescribeImage(im.MIMEType, n)
}

// typeOf is a declared media type as the answer repeats it: a short
// type/subtype, else a fixed phrase, so the guest's bytes never shape
// the answer beyond a token of the media-type grammar.
func typeOf(t string) string {
	switch {
	case t == "":
		return "no media type"
	case len(t) > maxMediaType || !mediaType.MatchString(t):
		return "not a media type"
	}
	return t
}

// shownNames maps the position of each image of the request (in Images
// order) to its quoted name, for the images of the last user message
// when its attachments block names as many shown images as it carries.
func shownNames(req Request) map[int]string {
	first, last := 0, -1
	for i, m := range req.Body.Messages {
		if m.Role == "user" {
			last = i
		}
	}
	if last < 0 || len(req.Body.Messages[last].Images) == 0 {
		return nil
	}
	for _, m := range req.Body.Messages[:last] {
		first += len(m.Images)
	}
	var names []string
	for line := range strings.Lines(req.Body.Messages[last].Text()) {
		if m := shownLine.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) != len(req.Body.Messages[last].Images) {
		return nil
	}
	out := make(map[int]string, len(names))
	for i, n := range names {
		out[first+i] = n
	}
	return out
}
