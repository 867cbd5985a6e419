package api

import (
	"net/http"
)

// handlerFunc answers a request or returns the error to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one endpoint: its pattern, its OpenAPI operation id, whether it
// needs a token, and which tighter rate limit applies besides the global one.
type route struct {
	method string
	path   string // below Prefix for API routes
	op     string // operationId in openapi.yaml; "" for routes outside the API
	public bool   // no token needed
	limit  limitClass
	h      handlerFunc
}

// table lists every route of the client API. openapi_test.go checks it
// against openapi.yaml in both directions.
func (s *Server) table() []route {
	return []route{
		{method: http.MethodGet, path: "/openapi.json", op: "getOpenAPI", public: true, h: s.serveOpenAPI},
		{method: http.MethodGet, path: "/servers", op: "listServers", h: s.listServers},
		{method: http.MethodPost, path: "/servers", op: "createServer", h: s.createServer},
		{method: http.MethodGet, path: "/servers/software", op: "listServerSoftware", h: s.listSoftware},
		{method: http.MethodGet, path: "/servers/{id}", op: "getServer", h: s.getServer},
		{method: http.MethodPatch, path: "/servers/{id}", op: "updateServer", h: s.updateServer},
		{method: http.MethodDelete, path: "/servers/{id}", op: "deleteServer", h: s.deleteServer},
		{method: http.MethodPost, path: "/servers/{id}/power", op: "powerServer", h: s.powerServer},
		{method: http.MethodGet, path: "/servers/{id}/sftp", op: "getSftpCredentials", h: s.sftpCredentials},
		{method: http.MethodPost, path: "/servers/{id}/sftp", op: "createSftpCredentials", h: s.sftpCredentials},
		{method: http.MethodPost, path: "/servers/{id}/command", op: "sendServerCommand", h: s.sendCommand},
		{method: http.MethodGet, path: "/servers/{id}/console", op: "getServerConsole", h: s.getConsole},
		{method: http.MethodGet, path: "/servers/{id}/console/stream", op: "streamServerConsole", h: s.streamConsole},
		{method: http.MethodPost, path: "/servers/{id}/reinstall", op: "reinstallServer", h: s.reinstallServer},
		{method: http.MethodGet, path: "/servers/{id}/files/list", op: "listFiles", h: s.listFiles},
		{method: http.MethodGet, path: "/servers/{id}/files/contents", op: "getFileContents", h: s.fileContents},
		{method: http.MethodGet, path: "/servers/{id}/files/download", op: "downloadFile", h: s.downloadFile},
		{method: http.MethodPost, path: "/servers/{id}/files/write", op: "writeFile", limit: limitFilesWrite, h: s.writeFile},
		{method: http.MethodPost, path: "/servers/{id}/files/create-directory", op: "createDirectory", h: s.createDirectory},
		{method: http.MethodPost, path: "/servers/{id}/files/rename", op: "renameFiles", h: s.renameFiles},
		{method: http.MethodPost, path: "/servers/{id}/files/copy", op: "copyFile", h: s.copyFile},
		{method: http.MethodPost, path: "/servers/{id}/files/delete", op: "deleteFiles", limit: limitFilesDelete, h: s.deleteFiles},
		{method: http.MethodPost, path: "/servers/{id}/files/chmod", op: "chmodFiles", h: s.chmodFiles},
		{method: http.MethodGet, path: "/servers/{id}/files/search", op: "searchFiles", limit: limitFilesSearch, h: s.searchFiles},
		{method: http.MethodPost, path: "/servers/{id}/files/compress", op: "compressFiles", limit: limitCompress, h: s.compressFiles},
		{method: http.MethodPost, path: "/servers/{id}/files/decompress", op: "decompressFile", limit: limitDecompress, h: s.decompressFile},
		{method: http.MethodPost, path: "/servers/{id}/files/pull", op: "startRemoteDownload", limit: limitFilesPull, h: s.startPull},
		{method: http.MethodGet, path: "/servers/{id}/files/pull", op: "listRemoteDownloads", h: s.listPulls},
		{method: http.MethodDelete, path: "/servers/{id}/files/pull/{downloadId}", op: "cancelRemoteDownload", h: s.cancelPull},
		{method: http.MethodGet, path: "/deployments/configurations", op: "listConfigurations", h: s.listConfigurations},
		{method: http.MethodPost, path: "/deployments/configurations", op: "createConfiguration", h: s.createConfiguration},
		{method: http.MethodGet, path: "/deployments/configurations/{configurationId}", op: "getConfiguration", h: s.getConfiguration},
		{method: http.MethodPatch, path: "/deployments/configurations/{configurationId}", op: "updateConfiguration", h: s.updateConfiguration},
		{method: http.MethodDelete, path: "/deployments/configurations/{configurationId}", op: "deleteConfiguration", h: s.deleteConfiguration},
		{method: http.MethodPost, path: "/deployments/configurations/{configurationId}/push", op: "pushConfiguration", h: s.pushConfiguration},
		{method: http.MethodGet, path: "/deployments/configurations/{configurationId}/versions", op: "listConfigurationVersions", h: s.listConfigurationVersions},
		{method: http.MethodGet, path: "/deployments/configurations/{configurationId}/versions/{versionNumber}", op: "getConfigurationVersion", h: s.getConfigurationVersion},
		{method: http.MethodGet, path: "/deployments/configurations/{configurationId}/diff", op: "diffConfigurationVersions", h: s.diffConfiguration},
		{method: http.MethodPost, path: "/deployments/configurations/{configurationId}/plan", op: "planConfiguration", h: s.planConfiguration},
		{method: http.MethodPost, path: "/deployments/apply", op: "applyConfiguration", h: s.applyConfiguration},
		{method: http.MethodGet, path: "/deployments/runs", op: "listRuns", h: s.listRuns},
		{method: http.MethodGet, path: "/deployments/runs/{runId}", op: "getRun", h: s.getRun},
		{method: http.MethodPost, path: "/deployments/runs/{runId}/cancel", op: "cancelRun", h: s.cancelRun},
		{method: http.MethodGet, path: "/secrets", op: "listSecrets", h: s.listSecrets},
		{method: http.MethodPut, path: "/secrets/{name}", op: "putSecret", h: s.putSecret},
		{method: http.MethodDelete, path: "/secrets/{name}", op: "deleteSecret", h: s.deleteSecret},
		{method: http.MethodGet, path: "/curseforge/search", op: "searchCurseForge", h: s.searchCurseForge},
		{method: http.MethodGet, path: "/curseforge/projects/{projectId}", op: "getCurseForgeProject", h: s.getCurseForgeProject},
		{method: http.MethodGet, path: "/curseforge/projects/{projectId}/versions", op: "listCurseForgeVersions", h: s.listCurseForgeVersions},
		{method: http.MethodGet, path: "/modrinth/search", op: "searchModrinth", h: s.searchModrinth},
		{method: http.MethodGet, path: "/modrinth/projects/{slug}/versions", op: "listModrinthVersions", h: s.listModrinthVersions},
		{method: http.MethodPost, path: "/servers/{id}/mods", op: "installMod", limit: limitFilesPull, h: s.installMod},
		{method: http.MethodPost, path: "/servers/{id}/modpack", op: "installModpack", limit: limitFilesPull, h: s.installModpack},
		{method: http.MethodGet, path: "/servers/{id}/modpack/{installId}", op: "getModpackInstall", h: s.getModpackInstall},
		{method: http.MethodPost, path: "/snapshots", op: "createSnapshot", h: s.createSnapshot},
		{method: http.MethodGet, path: "/snapshots", op: "listSnapshots", h: s.listSnapshots},
		{method: http.MethodGet, path: "/snapshots/{snapshotId}", op: "getSnapshot", h: s.getSnapshot},
		{method: http.MethodDelete, path: "/snapshots/{snapshotId}", op: "deleteSnapshot", h: s.deleteSnapshot},
		{method: http.MethodPost, path: "/snapshots/{snapshotId}/restore", op: "restoreSnapshot", h: s.restoreSnapshot},
		{method: http.MethodGet, path: "/restores", op: "listRestores", h: s.listRestores},
		{method: http.MethodGet, path: "/restores/{restoreId}", op: "getRestore", h: s.getRestore},
		{method: http.MethodGet, path: "/snapshots/{snapshotId}/download", op: "downloadSnapshot", limit: limitSnapshotDownload, h: s.downloadSnapshot},
	}
}
