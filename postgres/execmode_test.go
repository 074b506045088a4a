package postgres_test

import (
	"context"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
)

// TestQueryExecModes runs the statements through every pgx query execution mode an
// application may choose in its DSN (default_query_exec_mode), e.g. exec or
// simple_protocol behind PgBouncer in transaction mode.
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	dsn := testenv.DSN(t, testenv.Postgres)
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			db, err := openWith(dsn+sep(dsn)+"default_query_exec_mode="+mode, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() }) // after newStore's cleanup drops the tables
			s := newStore(t, db, outbox.Options{Lanes: 8})
			ctx := context.Background()
			r1, r2 := rec(base, "", 8), rec(base, "k", 8)
			r2.Body = nil
			insert(t, db, s, r1, r2)
			got, err := s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: base}, make([]outbox.Record, 4))
			if err != nil || len(got) != 1 || got[0].ID != r1.ID || got[0].Corrupt != nil || !got[0].CreatedAt.Equal(base) {
				t.Fatalf("Read = %+v, %v", got, err)
			}
			tok := outbox.NewToken()
			claimed, err := s.Claim(ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 5, Now: base, Until: base.Add(time.Minute), Token: tok}, nil)
			if err != nil || len(claimed) != 1 {
				t.Fatalf("Claim = %d, %v", len(claimed), err)
			}
			if n, err := s.Complete(ctx, outbox.CompleteParams{Token: tok, IDs: []outbox.ID{r1.ID}, Now: base, Lane: outbox.Unordered}); err != nil || n != 1 {
				t.Fatalf("Complete = %d, %v", n, err)
			}
			lease := outbox.NewToken()
			if ok, err := s.AcquireLease(ctx, outbox.LeaseParams{Lane: r2.Lane, Owner: "o", Token: lease, TTL: time.Minute}); err != nil || !ok {
				t.Fatalf("AcquireLease = %v, %v", ok, err)
			}
			claimed, err = s.Claim(ctx, outbox.ClaimParams{Lane: r2.Lane, Limit: 5, Now: base, Until: base.Add(time.Minute), Token: tok, Lease: lease, HoldParkedKeys: true}, nil)
			if err != nil || len(claimed) != 1 || len(claimed[0].Body) != 0 {
				t.Fatalf("Claim lane = %+v, %v", claimed, err)
			}
			if ok, err := s.Fail(ctx, outbox.FailParams{ID: r2.ID, Token: tok, Now: base, Error: "e", RetryAt: base.Add(time.Hour), Park: true, Lane: r2.Lane, Lease: lease}); err != nil || !ok {
				t.Fatalf("Fail = %v, %v", ok, err)
			}
			if n, err := s.Requeue(ctx, outbox.ParkedFilter{IDs: []outbox.ID{r2.ID}}); err != nil || n != 1 {
				t.Fatalf("Requeue = %d, %v", n, err)
			}
			if st, err := s.Stats(ctx, time.Now().Add(time.Hour)); err != nil || len(st.Lanes) != 1 { // requeued: due at the server's now
				t.Fatalf("Stats = %+v, %v", st, err)
			}
			// A batch above the VALUES threshold goes through unnest.
			var batch []outbox.Record
			for range 20 {
				r := rec(base, "", 8)
				r.DeliverAt = base.Add(2 * time.Hour)
				batch = append(batch, r)
			}
			insert(t, db, s, batch...)
			if n, err := s.Count(ctx, time.Now().Add(time.Hour)); err != nil || n != 21 { // r2 is due at the server's now
				t.Fatalf("Count = %d, %v; want 21", n, err)
			}
			// A batch sharing one created_at sends it once: truncated to microseconds
			// like the arrays' instants, never rounded by a text-mode encoding.
			created := base.Add(time.Second + 1999*time.Nanosecond)
			batch = batch[:0]
			for range 20 {
				batch = append(batch, rec(created, "", 8))
			}
			insert(t, db, s, batch...)
			got, err = s.Read(ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: base.Add(time.Minute)}, make([]outbox.Record, 40))
			if err != nil || len(got) != 20 {
				t.Fatalf("Read = %d rows, %v; want 20", len(got), err)
			}
			want := base.Add(time.Second + time.Microsecond)
			for _, r := range got {
				if !r.CreatedAt.Equal(want) || !r.DeliverAt.Equal(want) {
					t.Fatalf("row %s: created %s, deliver %s; want both %s", r.ID, r.CreatedAt, r.DeliverAt, want)
				}
			}
		})
	}
}

func sep(dsn string) string {
	for i := 0; i < len(dsn); i++ {
		if dsn[i] == '?' {
			return "&"
		}
	}
	return "?"
}
