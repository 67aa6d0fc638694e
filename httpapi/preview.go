package httpapi

import (
	"net/http"

	"gcos"
)

// preview answers POST /v1/preview (reader): what a proposed governance change would flip, computed read-only (a
// read-only transaction: a preview writes nothing, so a reader may ask).
func (s *server) preview(w http.ResponseWriter, r *http.Request) int {
	var req gcos.PreviewRequest
	if err := s.decodeBody(r, &req); err != nil {
		return s.failRequest(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	rep, err := s.previews.Preview(ctx, req)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, rep)
}
