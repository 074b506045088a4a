package dashboard

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"
	"unicode"
	"unicode/utf8"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

// metaEntry is one metadata entry of the row view.
type metaEntry struct {
	Name  shown
	Value shown
	Hex   bool // Value is hex: the stored bytes are not UTF-8
}

// preview is the bounded payload preview: text, indented JSON or a hex dump.
type preview struct {
	Kind  string // "text", "json", "hex" or "empty"
	Text  string
	Cut   bool
	Bytes int
}

type rowView struct {
	Row         parkedRow
	MessageType shown
	Tenant      shown
	DeliverAt   time.Time
	Meta        []metaEntry
	MetaTotal   int
	MetaMore    int
	MetaError   string
	Preview     preview
}

func (h *Handler) rowPage(w http.ResponseWriter, r *http.Request) {
	id, err := outbox.ParseID(r.URL.Query().Get("id"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "id: not a row id")
		return
	}
	ctx, cancel := h.queryContext(r)
	defer cancel()
	rec, err := h.parkedByID(ctx, id)
	switch {
	case err != nil:
		h.render(w, r, http.StatusOK, "error", "", []string{h.problem("parked row", err)})
		return
	case rec == nil:
		h.fail(w, r, http.StatusNotFound, "no parked row "+id.String()+" (requeued, purged or never parked)")
		return
	}
	now := h.now().UTC()
	v := rowView{Row: h.parkedRow(rec, now), MessageType: h.show(rec.MessageType), Tenant: h.show(rec.TenantID),
		DeliverAt: rec.DeliverAt, Preview: h.preview(rec.Body)}
	h.metadata(&v, rec.Headers)
	h.render(w, r, http.StatusOK, "row", v, nil)
}

// metadata decodes the stored headers and keeps the first MetadataEntries entries.
func (h *Handler) metadata(v *rowView, raw []byte) {
	hs, err := headercodec.Decode(raw, nil)
	if err != nil {
		v.MetaError = "the stored metadata cannot be decoded (" + err.Error() + ")"
		return
	}
	v.MetaTotal = len(hs)
	for i := range hs[:min(len(hs), h.config.MetadataEntries)] {
		val, isHex := h.showBytes(hs[i].Value)
		v.Meta = append(v.Meta, metaEntry{Name: h.show(hs[i].Name), Value: val, Hex: isHex})
	}
	v.MetaMore = len(hs) - len(v.Meta)
}

// preview shows at most PreviewBytes of body: indented JSON when the whole body is JSON
// and small enough to indent, text when it is printable UTF-8, else a hex dump.
func (h *Handler) preview(body []byte) preview {
	p := preview{Bytes: len(body)}
	limit := h.config.PreviewBytes
	switch {
	case len(body) == 0:
		p.Kind = "empty"
		return p
	case len(body) <= 64*limit && json.Valid(body):
		var buf bytes.Buffer
		if json.Indent(&buf, body, "", "  ") == nil {
			p.Kind = "json"
			p.Text, p.Cut = clip(buf.String(), limit)
			return p
		}
	}
	head := body[:min(len(body), limit)]
	if printable(head, len(head) < len(body)) {
		p.Kind = "text"
		p.Text, _ = clip(string(head), limit)
		p.Cut = len(head) < len(body)
		return p
	}
	head = body[:min(len(body), limit/4)] // a dump line is ~4 characters per byte
	p.Kind, p.Text, p.Cut = "hex", hex.Dump(head), len(head) < len(body)
	return p
}

// printable reports whether b is UTF-8 text without control characters other than
// whitespace (a rune cut at the end of a clipped head is allowed).
func printable(b []byte, clipped bool) bool {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			return clipped && len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
		b = b[size:]
	}
	return true
}
