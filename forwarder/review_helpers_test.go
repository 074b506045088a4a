package forwarder

import (
	"os"
	"testing"
)

// reviewOpen skips a review test that demonstrates an open finding (see
// /work/team/forwarder-findings.md) unless OUTBOX_REVIEW_OPEN=1, so that the suite stays
// green while the fix is pending; remove the call when the finding is fixed.
func reviewOpen(t *testing.T, finding string) {
	t.Helper()
	if os.Getenv("OUTBOX_REVIEW_OPEN") != "1" {
		t.Skip(finding + " (open; OUTBOX_REVIEW_OPEN=1 runs it), remove when fixed")
	}
}
