package modelapi

// ImageTokens is what one image of a request is taken to cost when its
// tokens are estimated before the call (a daily token budget reserves the
// estimate): the most either upstream charges for one image after its own
// resizing (the Messages API about 1,600 tokens for an image of 1.15
// megapixels, chat completions at most 1,105 at high detail). The image's
// base64, counted at four bytes a token as the rest of the request is,
// would reserve about 1.3 million tokens for a 5 MB photograph.
const ImageTokens = 1600

// Images reports the image parts of a rebuilt chat request: how many, and
// how many bytes their data URLs take in the request body.
func (in *ChatInput) Images() (n, size int) {
	for _, m := range in.Messages {
		for _, p := range m.Parts {
			if p.ImageURL != nil {
				n, size = n+1, size+len(p.ImageURL.URL)
			}
		}
	}
	return n, size
}

// Images reports the image blocks of a rebuilt Messages request, those in
// tool results included: how many, and how many bytes their base64 data
// takes in the request body.
func (r *MessagesRequest) Images() (n, size int) {
	for _, m := range r.Messages {
		n, size = addImages(m.Content, n, size)
	}
	return n, size
}

// addImages adds the images of rebuilt content (a string or a []any of
// blocks) to n and size.
func addImages(content any, n, size int) (int, int) {
	blocks, _ := content.([]any)
	for _, b := range blocks {
		switch b := b.(type) {
		case ImageBlock:
			n, size = n+1, size+len(b.Source.Data)
		case ToolResultBlock:
			n, size = addImages(b.Content, n, size)
		}
	}
	return n, size
}
