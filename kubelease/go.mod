module github.com/randflake/randflake/kubelease

go 1.26.0

require (
	github.com/randflake/randflake v0.2.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
