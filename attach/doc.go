// Package attach holds the host-side checks for the files of a session
// turn: images a guest sends in (docs/protocol.md, "Images and files"; docs/session.md, "Attachments in, reply files out") and reply
// files the worker sends out (docs/protocol.md, "Images and files"). The functions are pure: they read
// nothing from the disk or the network, so the surfaces and the runtime
// can call them on bytes they already hold.
//
// The contract:
//
//   - Images: the type is sniffed from the magic bytes only (SniffImage):
//     PNG, JPEG, GIF (87a/89a) or WebP (RIFF…WEBP). A file name or a
//     declared type never decides it. CheckImage takes 1 byte to
//     rtsandbox.MaxImageBytes (20 MiB), one of the four sniffed types, and,
//     when a type is declared, the same type (a PNG declared image/jpeg or
//     an HTML page named x.png is refused). CheckImages adds the count
//     (rtsandbox.MaxImages, 8) and the running total
//     (rtsandbox.MaxImagesTotal, 64 MiB). Errors are the root's
//     wire.ErrTooManyImages, ErrImage and ErrImageBudget, wrapped
//     with the reason.
//   - Names (docs/session.md, "Attachments in, reply files out"): SanitizeName NFC-normalises, replaces '/', '\'
//     and control characters (Unicode Cc) with '_', replaces a leading run
//     of dots with one '_', keeps the last 120 UTF-16 units without
//     splitting a character, and turns an empty result into "file". Its
//     result is always an wire.ValidSafeName. FileName builds
//     "<prefix>-<index>-<name>" from a prefix matching
//     ^[a-zA-Z0-9_-]{1,160}$ and keeps the whole within NAME_MAX (255
//     bytes), cutting the name further from the front where needed.
//   - A message's files (docs/session.md, "Attachments in, reply files out", input.go): ContentType keeps a declared (or
//     fetched) type only as a well-formed lowercase type/subtype, else
//     application/octet-stream. Classify sniffs the bytes: a real image of
//     the four types is taken with its sniffed type whatever it was
//     labelled; a file that claims to be an image (ClaimsImage: a declared
//     image/png|jpeg|gif|webp or a .png/.jpg/.jpeg/.gif/.webp name) and is
//     none is refused (ReasonNotImage). ImageBudget picks the images the
//     model sees (≤ 8, each ≤ 20 MiB, ≤ 64 MiB in all). Block words the
//     prompt's attachments block (names as the worker finds them, types,
//     sizes, each failure with its reason; ≤ MaxBlock units); Notice words
//     the fixed notice that ends the guest's reply (positions and the
//     root's fixed reasons, never a guest-chosen name).
//   - Reply files: DecodeReplyFiles validates with
//     wire.ValidateReplyFiles again (the host does not trust the
//     broker's check alone), decodes with the non-strict standard base64
//     decoder (docs/session.md, "Decisions (Go port)", the reference's parity), and re-checks each decoded
//     size and the total.
package attach
