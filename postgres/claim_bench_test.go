package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// BenchmarkClaimRenewComplete measures a forwarder's unordered cycle over a backlog:
// claim 100 rows, renew the batch by its ids (as the forwarder does), complete it; the
// table is refilled off the clock. The schema keeps no index on claim_token;
// "+tokenix" adds the one earlier schemas had and renews by token alone, as the
// forwarder used to.
func BenchmarkClaimRenewComplete(b *testing.B) {
	db := openDB(b, "")
	ctx := context.Background()
	for _, backlog := range []int{10_000, 100_000} {
		for _, variant := range []string{"schema", "+tokenix"} {
			b.Run(fmt.Sprintf("backlog=%d/%s", backlog, variant), func(b *testing.B) {
				s := newStore(b, db, outbox.Options{Lanes: 64})
				tbl := postgres.QualifiedTable(s.Options(), s.Options().OutboxTable())
				byToken := variant == "+tokenix"
				if byToken {
					if _, err := db.Exec(`CREATE INDEX ON ` + tbl + ` (claim_token) WHERE claim_token IS NOT NULL`); err != nil {
						b.Fatal(err)
					}
				}
				fillUnordered(b, db, s, backlog)
				if _, err := db.Exec(`ANALYZE ` + tbl); err != nil {
					b.Fatal(err)
				}
				now := base.Add(time.Hour)
				var dst []outbox.Record
				ids := make([]outbox.ID, 0, 100)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					tok := outbox.NewToken()
					var err error
					dst, err = s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 100, Now: now, Until: now.Add(time.Minute), Token: tok}, dst)
					if err != nil || len(dst) != 100 {
						b.Fatalf("Claim = %d, %v", len(dst), err)
					}
					ids = ids[:0]
					for i := range dst {
						ids = append(ids, dst[i].ID)
					}
					renew := outbox.RenewParams{Token: tok, IDs: ids, Now: now, Until: now.Add(2 * time.Minute), Lane: outbox.Unordered}
					if byToken {
						renew.IDs = nil
					}
					if n, err := s.Renew(ctx, renew); err != nil || n != 100 {
						b.Fatalf("Renew = %d, %v", n, err)
					}
					if n, err := s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: ids, Now: now, Lane: outbox.Unordered}); err != nil || n != 100 {
						b.Fatalf("Complete = %d, %v", n, err)
					}
					b.StopTimer()
					fillUnordered(b, db, s, 100)
					b.StartTimer()
				}
			})
		}
	}
}

func fillUnordered(b *testing.B, db *sql.DB, s outbox.Store, n int) {
	b.Helper()
	recs := make([]outbox.Record, 0, min(n, 5000))
	for n > 0 {
		recs = recs[:0]
		for range min(n, cap(recs)) {
			recs = append(recs, rec(base, "", 64))
		}
		insert(b, db, s, recs...)
		n -= len(recs)
	}
}
