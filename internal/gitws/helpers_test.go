package gitws

import "encoding/base64"

func encodeBasic(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
