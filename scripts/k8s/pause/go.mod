module runbox.local/k8sharness/pause

go 1.26.0
