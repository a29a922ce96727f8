module github.com/NVIDIA/go-nvfm

go 1.26.0
