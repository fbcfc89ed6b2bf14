package tokenizer

const (
	modelPath   = "../../../shared/models/tiny-code-f16.gguf"
	vectorsPath = "../../../shared/testdata/tokenizer/qwen2"
)
