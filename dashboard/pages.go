package dashboard

import "html/template"

// pageNames are the views; each is layout.html with its own template.
var pageNames = []string{"overview", "lanes", "parked", "row", "inbox", "find", "confirm", "result", "error"}

func parsePages() (map[string]*template.Template, error) {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}
