// Everything a user of the optim library needs, in one include.
#pragma once
#include <attograd/optim/adam.h>
#include <attograd/optim/clip.h>
#include <attograd/optim/optimizer.h>
#include <attograd/optim/schedule.h>
#include <attograd/optim/sgd.h>
