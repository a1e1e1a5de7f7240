train_mlp: --resume: no checkpoint in 'two'
