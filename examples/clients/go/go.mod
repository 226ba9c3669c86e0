module example.com/redlock-elector-client

go 1.21
