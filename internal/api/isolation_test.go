package api

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnhq/kiln/internal/store"
	"github.com/kilnhq/kiln/internal/store/storetest"
)

// isolationCase is one request of another team naming the owner's object:
// a path below Prefix with {placeholders}, a query, a body.
type isolationCase struct {
	method, path, query string
	body                any    // JSON, or a string sent as text/plain
	want                string // the code of the 404
}

// isolationCases covers every operation of the route table whose path names
// a team's object. TestEveryRouteHidesOtherTeams fails on an operation with
// such a parameter that has no case here, so a new route cannot be added
// without its check. Each body is valid, so the answer is the resolver's
// and not a validation error's.
var isolationCases = map[string]isolationCase{
	"getServer":                 {method: "GET", path: "/servers/{id}", want: "SERVER_NOT_FOUND"},
	"updateServer":              {method: "PATCH", path: "/servers/{id}", body: map[string]any{"env": map[string]any{"PWNED": "1"}}, want: "SERVER_NOT_FOUND"},
	"deleteServer":              {method: "DELETE", path: "/servers/{id}", want: "SERVER_NOT_FOUND"},
	"powerServer":               {method: "POST", path: "/servers/{id}/power", body: map[string]any{"action": "start"}, want: "SERVER_NOT_FOUND"},
	"getSftpCredentials":        {method: "GET", path: "/servers/{id}/sftp", want: "SERVER_NOT_FOUND"},
	"createSftpCredentials":     {method: "POST", path: "/servers/{id}/sftp", body: map[string]any{}, want: "SERVER_NOT_FOUND"},
	"sendServerCommand":         {method: "POST", path: "/servers/{id}/command", body: map[string]any{"command": "op mallory"}, want: "SERVER_NOT_FOUND"},
	"getServerConsole":          {method: "GET", path: "/servers/{id}/console", want: "SERVER_NOT_FOUND"},
	"streamServerConsole":       {method: "GET", path: "/servers/{id}/console/stream", want: "SERVER_NOT_FOUND"},
	"reinstallServer":           {method: "POST", path: "/servers/{id}/reinstall", body: map[string]any{}, want: "SERVER_NOT_FOUND"},
	"listFiles":                 {method: "GET", path: "/servers/{id}/files/list", query: "directory=/", want: "SERVER_NOT_FOUND"},
	"getFileContents":           {method: "GET", path: "/servers/{id}/files/contents", query: "file=/secret.txt", want: "SERVER_NOT_FOUND"},
	"downloadFile":              {method: "GET", path: "/servers/{id}/files/download", query: "file=/secret.txt", want: "SERVER_NOT_FOUND"},
	"writeFile":                 {method: "POST", path: "/servers/{id}/files/write", query: "file=/secret.txt", body: "pwned", want: "SERVER_NOT_FOUND"},
	"createDirectory":           {method: "POST", path: "/servers/{id}/files/create-directory", body: map[string]any{"root": "/", "name": "pwned"}, want: "SERVER_NOT_FOUND"},
	"renameFiles":               {method: "POST", path: "/servers/{id}/files/rename", body: map[string]any{"root": "/", "files": []map[string]string{{"from": "secret.txt", "to": "gone.txt"}}}, want: "SERVER_NOT_FOUND"},
	"copyFile":                  {method: "POST", path: "/servers/{id}/files/copy", body: map[string]any{"location": "/secret.txt"}, want: "SERVER_NOT_FOUND"},
	"deleteFiles":               {method: "POST", path: "/servers/{id}/files/delete", body: map[string]any{"root": "/", "files": []string{"secret.txt"}}, want: "SERVER_NOT_FOUND"},
	"chmodFiles":                {method: "POST", path: "/servers/{id}/files/chmod", body: map[string]any{"root": "/", "files": []map[string]string{{"file": "secret.txt", "mode": "666"}}}, want: "SERVER_NOT_FOUND"},
	"searchFiles":               {method: "GET", path: "/servers/{id}/files/search", query: "directory=/&pattern=secret", want: "SERVER_NOT_FOUND"},
	"compressFiles":             {method: "POST", path: "/servers/{id}/files/compress", body: map[string]any{"root": "/", "files": []string{"secret.txt"}}, want: "SERVER_NOT_FOUND"},
	"decompressFile":            {method: "POST", path: "/servers/{id}/files/decompress", body: map[string]any{"root": "/", "file": "pack.mrpack"}, want: "SERVER_NOT_FOUND"},
	"startRemoteDownload":       {method: "POST", path: "/servers/{id}/files/pull", body: map[string]any{"url": "http://files.test/x.jar"}, want: "SERVER_NOT_FOUND"},
	"listRemoteDownloads":       {method: "GET", path: "/servers/{id}/files/pull", want: "SERVER_NOT_FOUND"},
	"cancelRemoteDownload":      {method: "DELETE", path: "/servers/{id}/files/pull/{downloadId}", want: "SERVER_NOT_FOUND"},
	"installMod":                {method: "POST", path: "/servers/{id}/mods", body: map[string]any{"catalog": "modrinth", "project_id": "luckperms", "version_id": "OrIs0S6b"}, want: "SERVER_NOT_FOUND"},
	"installModpack":            {method: "POST", path: "/servers/{id}/modpack", body: map[string]any{"file": "/pack.mrpack"}, want: "SERVER_NOT_FOUND"},
	"getModpackInstall":         {method: "GET", path: "/servers/{id}/modpack/{installId}", want: "SERVER_NOT_FOUND"},
	"getConfiguration":          {method: "GET", path: "/deployments/configurations/{configurationId}", want: "CONFIGURATION_NOT_FOUND"},
	"updateConfiguration":       {method: "PATCH", path: "/deployments/configurations/{configurationId}", body: map[string]any{"yaml": specLobby}, want: "CONFIGURATION_NOT_FOUND"},
	"deleteConfiguration":       {method: "DELETE", path: "/deployments/configurations/{configurationId}", want: "CONFIGURATION_NOT_FOUND"},
	"pushConfiguration":         {method: "POST", path: "/deployments/configurations/{configurationId}/push", body: map[string]any{"push_message": "pwned"}, want: "CONFIGURATION_NOT_FOUND"},
	"listConfigurationVersions": {method: "GET", path: "/deployments/configurations/{configurationId}/versions", want: "CONFIGURATION_NOT_FOUND"},
	"getConfigurationVersion":   {method: "GET", path: "/deployments/configurations/{configurationId}/versions/{versionNumber}", want: "CONFIGURATION_NOT_FOUND"},
	"diffConfigurationVersions": {method: "GET", path: "/deployments/configurations/{configurationId}/diff", query: "to=1", want: "CONFIGURATION_NOT_FOUND"},
	"planConfiguration":         {method: "POST", path: "/deployments/configurations/{configurationId}/plan", body: map[string]any{"yaml": specLobby}, want: "CONFIGURATION_NOT_FOUND"},
	"getRun":                    {method: "GET", path: "/deployments/runs/{runId}", want: "RUN_NOT_FOUND"},
	"cancelRun":                 {method: "POST", path: "/deployments/runs/{runId}/cancel", want: "RUN_NOT_FOUND"},
	"getSnapshot":               {method: "GET", path: "/snapshots/{snapshotId}", want: "SNAPSHOT_NOT_FOUND"},
	"deleteSnapshot":            {method: "DELETE", path: "/snapshots/{snapshotId}", want: "SNAPSHOT_NOT_FOUND"},
	"restoreSnapshot":           {method: "POST", path: "/snapshots/{snapshotId}/restore", body: map[string]any{}, want: "SNAPSHOT_NOT_FOUND"},
	"downloadSnapshot":          {method: "GET", path: "/snapshots/{snapshotId}/download", query: "format=tar", want: "SNAPSHOT_NOT_FOUND"},
	"getRestore":                {method: "GET", path: "/restores/{restoreId}", want: "NOT_FOUND"},
	"deleteSecret":              {method: "DELETE", path: "/secrets/{name}", want: "NOT_FOUND"},
	// A name the caller chooses: another team's PUT makes its own secret
	// (want ""), and the owner's stays as it was (ownerState).
	"putSecret": {method: "PUT", path: "/secrets/{name}", body: map[string]any{"value": "stolen"}},
}

// publicPath says whether a route's path names an object that belongs to
// no team (the catalogs' projects).
func publicPath(path string) bool {
	return strings.Contains(path, "{projectId}") || strings.Contains(path, "{slug}")
}

// TestEveryRouteHidesOtherTeams: team "default" owns one object of every
// kind an id names (a server with files, a download, a modpack install, a
// configuration with a version and a run, a snapshot); team "other" sends
// every route of the table that names one, and the requests that name one
// in a body or a query. Each must answer as for an id nobody has — byte for
// byte, the id aside: 404 with the kind's code on a path — so nothing tells
// the other team that the object exists; and afterwards the owner's
// objects are all as they were.
func TestEveryRouteHidesOtherTeams(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h, _ := newRunsHarness(t, db)
		owner := h.ownerObjects()
		other := *h
		other.token = h.otherTeamToken()
		mine, _ := other.fileServer(1024)
		mySnap := other.readySnapshot(mine, "mine")
		before := h.ownerState(owner)

		// Every route whose path names a team's object.
		for _, rt := range h.srv.table() {
			if !strings.Contains(rt.path, "{") || publicPath(rt.path) {
				continue
			}
			c, ok := isolationCases[rt.op]
			if !ok {
				t.Errorf("%s %s (%s) names a team's object and has no case in isolationCases", rt.method, rt.path, rt.op)
				continue
			}
			if c.method != rt.method || c.path != rt.path {
				t.Errorf("isolationCases[%s] is %s %s, the route %s %s", rt.op, c.method, c.path, rt.method, rt.path)
				continue
			}
			t.Run(rt.op, func(t *testing.T) {
				if c.want == "" {
					st, _, got := other.do(c.method, Prefix+strings.ReplaceAll(c.path, "{name}", owner["{name}"]), other.token,
						strings.NewReader(`{"value":"stolen"}`), "Content-Type", "application/json")
					if st != 200 || mustJSON(got)["created"] != true {
						t.Errorf("%s by another team = %d %s, want its own created", c.path, st, got)
					}
					// Gone again, so the other routes find only the owner's.
					if st, _, got := other.do("DELETE", Prefix+"/secrets/"+owner["{name}"], other.token, nil); st != 200 {
						t.Errorf("delete of the other team's own: %d %s", st, got)
					}
					return
				}
				st, got := other.sameAsNobodys(t, c, owner, nil)
				wantError(t, st, got, 404, c.want, "not found")
			})
		}
		// An object of the other team's own, with an owner's object under
		// it or beside it in the path.
		for _, c := range []isolationCase{
			{method: "DELETE", path: "/servers/{mine}/files/pull/{downloadId}"},
			{method: "GET", path: "/servers/{mine}/modpack/{installId}"},
		} {
			t.Run(c.path, func(t *testing.T) {
				st, got := other.sameAsNobodys(t, c, owner, map[string]string{"{mine}": mine})
				if st != 404 {
					t.Errorf("status %d, want 404: %s", st, got)
				}
			})
		}
		// Owner's ids in a body or a query.
		for _, c := range []isolationCase{
			{method: "POST", path: "/snapshots", body: map[string]any{"source_server_id": "{id}", "name": "stolen"}},
			{method: "GET", path: "/snapshots", query: "server_id={id}"},
			{method: "POST", path: "/snapshots/{mySnap}/restore", body: map[string]any{"server_id": "{id}"}},
			{method: "POST", path: "/deployments/apply", body: map[string]any{"configuration_id": "{configurationId}"}},
			{method: "GET", path: "/deployments/runs", query: "configuration_id={configurationId}"},
			{method: "GET", path: "/restores", query: "server_id={id}"},
			{method: "GET", path: "/restores", query: "snapshot_id={snapshotId}"},
		} {
			t.Run(c.method+" "+c.path+" "+c.query, func(t *testing.T) {
				other.sameAsNobodys(t, c, owner, map[string]string{"{mySnap}": mySnap})
			})
		}
		if after := h.ownerState(owner); after != before {
			t.Errorf("the owner's objects changed:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// ownerObjects makes, as the harness's team, one object of each kind and
// returns their ids by placeholder.
func (h *harness) ownerObjects() map[string]string {
	t := h.t
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "plugin bytes")
	}))
	t.Cleanup(up.Close)
	id, _ := h.fileServer(1024)
	if st, body := h.files("POST", id, "write?file=/secret.txt", "the owner's secret\n", "Content-Type", "text/plain"); st != 200 {
		t.Fatalf("write: %d %s", st, body)
	}
	if st, body := h.files("POST", id, "write?file=/pack.mrpack", string(emptyModpack(t)), "Content-Type", "application/octet-stream"); st != 200 {
		t.Fatalf("write the pack: %d %s", st, body)
	}
	st, body := h.files("POST", id, "pull", map[string]string{"url": up.URL + "/Hello.jar", "directory": "/plugins"})
	if st != 202 {
		t.Fatalf("pull: %d %s", st, body)
	}
	dl := mustJSON(body)["download"].(map[string]any)["identifier"].(string)
	h.waitDownload(id, dl)
	st, body = h.postJSON("/servers/"+id+"/modpack", map[string]any{"file": "/pack.mrpack"})
	if st != 202 {
		t.Fatalf("modpack: %d %s", st, body)
	}
	install := mustJSON(body)["install"].(map[string]any)["id"].(string)
	cfg := h.createConfiguration("network", specLobby)
	run := h.apply(cfg, "")["run"].(map[string]any)["id"].(string)
	snap := h.readySnapshot(id, "nightly")
	st, body = h.postJSON("/snapshots/"+snap+"/restore", map[string]any{})
	if st != 202 {
		t.Fatalf("restore: %d %s", st, body)
	}
	rst := mustJSON(body)["restore"].(map[string]any)["restore_id"].(string)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, out := h.sendJSON("GET", "/restores/"+rst, nil)
		if status := out["restore"].(map[string]any)["status"]; st == 200 && (status == "done" || status == "failed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restore %s did not end within 60 s", rst)
		}
	}
	const secret = "OWNER_SECRET_1"
	if st, _, body := h.do("PUT", Prefix+"/secrets/"+secret, h.token, strings.NewReader(`{"value":"the owner's"}`), "Content-Type", "application/json"); st != 200 {
		t.Fatalf("secret: %d %s", st, body)
	}
	return map[string]string{
		"{id}": id, "{downloadId}": dl, "{installId}": install, "{configurationId}": cfg,
		"{versionNumber}": "1", "{runId}": run, "{snapshotId}": snap, "{restoreId}": rst, "{name}": secret,
	}
}

// emptyModpack is a Modrinth pack with no files.
func emptyModpack(t *testing.T) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("modrinth.index.json")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(w, `{"formatVersion":1,"game":"minecraft","versionId":"1","name":"empty","dependencies":{"minecraft":"dev"},"files":[]}`)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ownerState describes, as the owner sees them, every object of
// ownerObjects and the server's files.
func (h *harness) ownerState(o map[string]string) string {
	var b strings.Builder
	for _, p := range []string{
		"/servers/" + o["{id}"],
		"/servers/" + o["{id}"] + "/sftp",
		"/servers/" + o["{id}"] + "/files/pull",
		"/servers/" + o["{id}"] + "/modpack/" + o["{installId}"],
		"/deployments/configurations/" + o["{configurationId}"],
		"/deployments/configurations/" + o["{configurationId}"] + "/versions",
		"/deployments/runs/" + o["{runId}"],
		"/snapshots/" + o["{snapshotId}"],
		"/snapshots",
		"/restores/" + o["{restoreId}"],
		"/restores",
		"/secrets",
	} {
		st, _, body := h.do("GET", Prefix+p, h.token, nil)
		fmt.Fprintf(&b, "%s %d %s\n", p, st, body)
	}
	b.WriteString(treeHash(h.t, filepath.Join(h.dataDir, "servers", o["{id}"])))
	return b.String()
}

// sameAsNobodys sends c with the owner's ids (and extra) in place of its
// placeholders, then again with ids of the same form that nobody has, and
// fails unless both answers are equal once each names its own ids. It
// returns the first answer.
func (h harness) sameAsNobodys(t *testing.T, c isolationCase, owner, extra map[string]string) (int, []byte) {
	t.Helper()
	h.t = t // a copy for the subtest: its failures are the subtest's
	ghosts := map[string]string{}
	for k, v := range owner {
		ghosts[k] = nobodys(v)
	}
	send := func(ids map[string]string) (int, []byte) {
		fill := func(s string) string {
			for k, v := range extra {
				s = strings.ReplaceAll(s, k, v)
			}
			for k, v := range ids {
				s = strings.ReplaceAll(s, k, url.PathEscape(v))
			}
			return s
		}
		path := Prefix + fill(c.path)
		if c.query != "" {
			path += "?" + fill(c.query)
		}
		var body *bytes.Reader
		var hdr []string
		switch b := c.body.(type) {
		case nil:
			body = bytes.NewReader(nil)
		case string:
			body = bytes.NewReader([]byte(b))
			hdr = []string{"Content-Type", "text/plain"}
		default:
			data, _ := json.Marshal(b)
			body = bytes.NewReader([]byte(fill(string(data))))
			hdr = []string{"Content-Type", "application/json"}
		}
		st, _, out := h.do(c.method, path, h.token, body, hdr...)
		// The answer with the request's own ids named alike.
		norm := string(out)
		for k, v := range ids {
			if len(v) >= 8 { // not a version number: "1" is in every answer
				norm = strings.ReplaceAll(norm, v, k)
			}
		}
		return st, []byte(norm)
	}
	st, got := send(owner)
	gst, ghost := send(ghosts)
	if st != gst || !bytes.Equal(got, ghost) {
		t.Errorf("%s %s?%s tells the owner's object from nobody's:\n owner's: %d %s\n nobody's: %d %s", c.method, c.path, c.query, st, got, gst, ghost)
	}
	return st, got
}

// nobodys is an id of the same form as id that no object has: its last
// character changed within its class (digit, lowercase, uppercase).
func nobodys(id string) string {
	b := []byte(id)
	i := len(b) - 1
	switch c := b[i]; {
	case c >= '0' && c <= '9':
		b[i] = '0' + (c-'0'+1)%10
	case c >= 'a' && c <= 'f':
		b[i] = 'a' + (c-'a'+1)%6
	case c >= 'g' && c <= 'z':
		b[i] = 'g' + (c-'g'+1)%20
	case c >= 'A' && c <= 'Z':
		b[i] = 'A' + (c-'A'+1)%26
	}
	return string(b)
}
