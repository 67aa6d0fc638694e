package httpapi

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"

	"gcos"
)

// The dashboard is a static shell (html/template + embedded assets, no CDN: the page must work offline) that
// polls the summary endpoints with the reader token the user keeps in sessionStorage.

//go:embed web/index.html web/static openapi.json
var assets embed.FS

type dashboardAssets struct {
	page    *template.Template
	static  fs.FS
	openapi []byte
}

func loadDashboard() (*dashboardAssets, error) {
	page, err := template.ParseFS(assets, "web/index.html")
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "web/static")
	if err != nil {
		return nil, err
	}
	doc, err := assets.ReadFile("openapi.json")
	if err != nil {
		return nil, err
	}
	return &dashboardAssets{page: page, static: static, openapi: doc}, nil
}

// dashboardData is what the shell template needs: nothing secret, nothing from the database.
type dashboardData struct {
	Version string
	// Auth says how the page's requests authenticate: "session" (the login link's cookie), "token" (a token the
	// user types, kept for the tab) or "none" (--insecure-no-auth).
	Auth string
}

var hdrHTML = []string{"text/html; charset=utf-8"}

// dashboard answers GET / with the dashboard shell (public: it holds no data; the data endpoints need a token or
// the session the login link opened).
func (s *server) dashboard(w http.ResponseWriter, r *http.Request) int {
	auth := "token"
	if _, has, err := s.logins.sessionOf(r); has && err == nil {
		auth = "session"
	} else if s.auth.insecure {
		auth = "none"
	}
	var buf bytes.Buffer
	if err := s.ui.page.Execute(&buf, dashboardData{Version: s.version, Auth: auth}); err != nil {
		s.logger.Error("render dashboard", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	h := w.Header()
	h["Content-Type"] = hdrHTML
	h["Cache-Control"] = hdrNoStore
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
	return http.StatusOK
}

// static answers GET /static/{file} from the embedded assets.
func (s *server) static(w http.ResponseWriter, r *http.Request) int {
	name := r.PathValue("file")
	if !fs.ValidPath(name) {
		return writeJSON(w, http.StatusNotFound, ErrorBody{Error: ErrorDetail{Code: gcos.ENOTFOUND, Message: "no such file"}})
	}
	if st, err := fs.Stat(s.ui.static, name); err != nil || st.IsDir() {
		return writeJSON(w, http.StatusNotFound, ErrorBody{Error: ErrorDetail{Code: gcos.ENOTFOUND, Message: "no such file"}})
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, s.ui.static, name)
	return http.StatusOK
}

// favicon answers GET /favicon.ico with the dashboard's icon (SVG, which browsers take under any name).
func (s *server) favicon(w http.ResponseWriter, r *http.Request) int {
	b, err := fs.ReadFile(s.ui.static, "favicon.svg")
	if err != nil {
		return writeJSON(w, http.StatusNotFound, ErrorBody{Error: ErrorDetail{Code: gcos.ENOTFOUND, Message: "no such file"}})
	}
	h := w.Header()
	h.Set("Content-Type", "image/svg+xml")
	h.Set("Cache-Control", "max-age=86400")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return http.StatusOK
}

// APIIndex is GET /v1: every route, who may call it, and where the full contract is.
type APIIndex struct {
	Version string  `json:"version"`
	OpenAPI string  `json:"openapi"`
	Routes  []Route `json:"routes"`
}

// index answers GET /v1 (public: it lists routes, no data).
func (s *server) index(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusOK, APIIndex{Version: s.version, OpenAPI: "/openapi.json", Routes: s.routes})
}

// openapi answers GET /openapi.json with the hand-written OpenAPI 3.1 document.
func (s *server) openapi(w http.ResponseWriter, _ *http.Request) int {
	h := w.Header()
	h["Content-Type"] = hdrJSON
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(s.ui.openapi)
	return http.StatusOK
}

// OpenAPIDocument is the OpenAPI 3.1 document GET /openapi.json serves.
func OpenAPIDocument() []byte {
	doc, _ := assets.ReadFile("openapi.json") // embedded: cannot fail
	return doc
}
