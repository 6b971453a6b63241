package enginetest

// KnownDifferences is the one list of behaviours where a backend is known
// to differ from the rule (and from the reference model), with the reason.
// A backend names the entries that apply to it in Backend.Differs; the
// clocked suites then stay clear of that behaviour for it (and only for
// it) instead of failing, so every other answer is still compared. An
// entry is removed when the backend is fixed.
var KnownDifferences = map[string]string{
	// Redis judges ReceiptMembers' cursor before the sender-only rule:
	// scRcptGet answers -4 (a cursor who never joined: ErrInvalid) for any
	// current member, and only then does Go compare the viewer with the
	// sender, so a member who is not the sender learns whether a user ever
	// joined instead of getting ErrForbidden. Minimal case (seed
	// 1795423112818779686): createGroup u1 [7 3 6 4]; sendMessage u1 → m;
	// receiptMembers u4 m after=5 → ErrInvalid, want ErrForbidden.
	ReceiptPageCursorFirst: "ReceiptMembers by a member who is not the sender, with a cursor who never joined, is ErrInvalid instead of ErrForbidden",
}

// Names of KnownDifferences entries.
const (
	ReceiptPageCursorFirst = "receipt-page-cursor-first"
)
