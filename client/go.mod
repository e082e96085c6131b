module github.com/fencegate/fencegate/client

go 1.24.0
