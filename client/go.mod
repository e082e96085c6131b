module github.com/fencegate/fencegate/client

go 1.26.0
