module github.com/randflake/randflake/.ci/modproxy

go 1.26.0

require golang.org/x/mod v0.41.0
