package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"text/template"

	sprig "github.com/Masterminds/sprig"
)

type result struct {
	Out string `json:"out"`
	Err string `json:"err"`
	Ok  bool   `json:"ok"`
}

func main() {
	funcs := sprig.GenericFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	delete(funcs, "getHostByName")
	data := map[string]string{
		"a": "A", "b": "", "n": "42", "pw": "p<&>\"\\", "multi": "l1\nl2", "db-pass": "dashed",
	}
	var cases []string
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	w := bufio.NewWriter(os.Stdout)
	var results []result
	for _, src := range cases {
		r := func() (r result) {
			defer func() {
				if p := recover(); p != nil {
					r = result{Err: fmt.Sprintf("PANIC %v", p)}
				}
			}()
			t, err := template.New("t").Funcs(funcs).Parse(src)
			if err != nil {
				return result{Err: err.Error()}
			}
			var buf bytes.Buffer
			if err := t.Execute(&buf, data); err != nil {
				return result{Err: err.Error()}
			}
			return result{Out: buf.String(), Ok: true}
		}()
		results = append(results, r)
	}
	json.NewEncoder(w).Encode(results)
	w.Flush()
}
