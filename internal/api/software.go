package api

import (
	"net/http"

	"github.com/kilnhq/kiln/internal/catalog"
)

// softwareJSON is the seed's SoftwareProfile plus category. The profile's
// start template, installer and Java rule stay internal: they are how Kiln
// runs the software, not something a client chooses.
type softwareJSON struct {
	ID                   int          `json:"id"`
	Name                 string       `json:"name"`
	Type                 string       `json:"type"`
	Description          string       `json:"description"`
	Category             string       `json:"category"`
	DockerImages         []imageJSON  `json:"docker_images"`
	EnvironmentVariables []envVarJSON `json:"environment_variables"`
}

type imageJSON struct {
	Value string `json:"value"`
	Label string `json:"label"`
}

type envVarJSON struct {
	Key         string   `json:"key"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Default     any      `json:"default"`
	Optional    bool     `json:"optional"`
	Type        string   `json:"type"`
	Enum        []string `json:"enum,omitempty"`
	Min         *int     `json:"min,omitempty"`
	Max         *int     `json:"max,omitempty"`
	Property    string   `json:"property,omitempty"`
}

func toSoftwareJSON(p catalog.Profile) softwareJSON {
	out := softwareJSON{
		ID: p.ID, Name: p.Name, Type: p.Type, Description: p.Description, Category: string(p.Category),
		DockerImages:         make([]imageJSON, len(p.DockerImages)),
		EnvironmentVariables: make([]envVarJSON, len(p.EnvironmentVariables)),
	}
	for i, im := range p.DockerImages {
		out.DockerImages[i] = imageJSON{Value: im.Value, Label: im.Label}
	}
	for i, ev := range p.EnvironmentVariables {
		out.EnvironmentVariables[i] = envVarJSON{Key: ev.Key, Title: ev.Title, Description: ev.Description,
			Default: ev.Default, Optional: ev.Optional, Type: ev.Kind(), Enum: ev.Enum, Min: ev.Min, Max: ev.Max, Property: ev.Property}
	}
	return out
}

// listSoftware answers the catalog; it is the same for every team.
func (s *Server) listSoftware(w http.ResponseWriter, _ *http.Request) error {
	list := s.deps.Catalog.List()
	out := struct {
		Count    int            `json:"count"`
		Software []softwareJSON `json:"software"`
	}{Count: len(list), Software: make([]softwareJSON, len(list))}
	for i, p := range list {
		out.Software[i] = toSoftwareJSON(p)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
