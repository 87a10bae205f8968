package router

import "github.com/rtsandbox/rtsandbox"

// The door (issue 21 item 2): the one place that proves the seal for
// every surface and both modes. Before the router hands anything to a
// surface, it asks its Door whether that holds a credential of the host
// in any form: a reply, notice or report (its whole text, before the
// router cuts it into chunks: a chunk boundary, and the code fence the
// cut closes and reopens around it, hides nothing; and its files), a
// preview (the whole text so far) and an owner command's answer. What the door refuses is
// replaced by the fixed failure text (a reply, notice or report), withheld
// (its files, and every later preview of the message) or answered with
// the fixed command-failed text, and logged under its own class with the
// credential's config key, never its value. The router knows no
// credential: the host's wiring gives it a Door that does (package door).

// Door checks what is about to leave for a guest.
type Door interface {
	// Check returns an error wrapping rtsandbox.ErrCredential when text,
	// or any file (its name or bytes), holds a credential of the host in
	// any form, and nil otherwise. The error names the credential, never
	// its value.
	Check(text string, files []rtsandbox.File) error
}

// kindCommand is the kind OnDoor is given for an owner command's answer.
const kindCommand DeliveryKind = "command"

// guard checks text and files for a delivery like d: it returns them as
// they are, or, when the door refuses them, the fixed failure text and no
// files.
func (r *Router) guard(d Delivery, text string, files []rtsandbox.File) (string, []rtsandbox.File) {
	if err := r.door.Check(text, files); err != nil {
		r.refusedAtDoor(d.Channel, d.Kind, err)
		return rtsandbox.GuestText(err), nil
	}
	return text, files
}

// passes reports whether the door lets text go to channel as kind,
// logging and counting a refusal.
func (r *Router) passes(channel rtsandbox.ChannelKey, kind DeliveryKind, text string) bool {
	if err := r.door.Check(text, nil); err != nil {
		r.refusedAtDoor(channel, kind, err)
		return false
	}
	return true
}

func (r *Router) refusedAtDoor(channel rtsandbox.ChannelKey, kind DeliveryKind, err error) {
	r.log.Error("credential at the door: withheld from the guest", "class", rtsandbox.KindCredential.String(),
		"channel", channel, "kind", string(kind), "err", err)
	if r.onDoor != nil {
		r.onDoor(channel, kind)
	}
}
